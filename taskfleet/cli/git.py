"""`taskfleet git enqueue|flush|retry|status|id`: drive a clone's `GitBatchWorkflow`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from typing import Any

from temporalio.client import Client, WorkflowUpdateFailedError

from taskfleet.cli.common import (
    add_batch_flags,
    add_clone_flags,
    add_json_flag,
    ask,
    client_for,
    examples,
    to_json,
)
from taskfleet.clients.connection import StartupError
from taskfleet.clients.git_batcher import GitBatcherClient, git_batch_workflow_id
from taskfleet.clients.search_attributes import ensure_search_attributes
from taskfleet.clients.served import served
from taskfleet.core.models.git_batch import BatchResult, GitBatchConfig, GitBatchStatus, GitOp


def _batcher(args: argparse.Namespace, client: Client) -> GitBatcherClient:
    config = GitBatchConfig(  # settings matter only to a call that starts the batcher
        repo=os.path.abspath(args.repo),
        remote=args.remote,
        max_batch_size=getattr(args, "max_batch", 10),
        max_batch_age_seconds=getattr(args, "max_wait_seconds", 5.0),
        atomic=getattr(args, "atomic", False),
    )
    return GitBatcherClient(client, config, args.task_queue)


def _op_from_args(args: argparse.Namespace) -> GitOp | dict[str, Any]:
    """The op as flags give it (GitBatcherClient sends only the fields set), or --op-json as is."""
    if args.op_json:
        try:
            raw = json.loads(args.op_json)
        except json.JSONDecodeError as err:
            raise StartupError(f"--op-json is not JSON: {err}") from None
        return raw
    return GitOp(
        op_type=args.op_type,
        branch=args.branch_arg or args.branch,
        id=args.id or "",
        message=args.message or "",
        files=args.file or [],
        worktree=os.path.abspath(args.worktree) if args.worktree else "",
        target=args.target or "",
        reply_to=args.reply_to or "",
    )


async def git_enqueue(args: argparse.Namespace) -> int:
    client = await client_for(args)
    notice = await ensure_search_attributes(client)
    if notice:
        print(f"taskfleet: {notice}", file=sys.stderr)
    gb = _batcher(args, client)
    op = _op_from_args(args)
    if args.wait:
        try:
            op_id = await served(client, gb.workflow_id, gb.submit(op), "the git batcher's answer")
        except WorkflowUpdateFailedError as err:
            print(f"refused: {err.cause}", file=sys.stderr)
            return 1
        print(f"accepted op {op_id} on {gb.workflow_id}")
    else:
        await gb.enqueue(op)
        print(f"sent to {gb.workflow_id} (see `taskfleet git status --repo "
              f"{args.repo}` for its fate)")
    return 0


async def git_retry(args: argparse.Namespace) -> int:
    client = await client_for(args)
    gb = _batcher(args, client)
    try:
        result = await served(client, gb.workflow_id, gb.retry(args.batch_id), "the retry")
    except WorkflowUpdateFailedError as err:
        print(f"taskfleet: retry refused: {getattr(err.cause, 'message', None) or err.cause}",
              file=sys.stderr)
        return 1
    print(to_json(result) if args.json else format_batch_result(result))
    return 0 if result.status != "failed" else 1


async def git_flush(args: argparse.Namespace) -> int:
    client = await client_for(args)
    gb = _batcher(args, client)
    if not args.wait:
        await gb.flush()
        print(f"flush requested on {gb.workflow_id}")
        return 0
    result = await served(client, gb.workflow_id, gb.flush_now(), "the flush")
    if args.json:
        print(to_json(result))
    else:
        print(format_batch_result(result))
    return 0 if result.status != "failed" else 1


def _wrapped(label: str, text: str, width: int = 100) -> list[str]:
    """`label text`, the text on as many lines as it needs, continuation lines indented under it."""
    text = " ".join(text.split())
    return textwrap.wrap(text, width, initial_indent=label, subsequent_indent=" " * len(label),
                         break_long_words=False, break_on_hyphens=False) or [label]


def format_batch_result(result: BatchResult) -> str:
    """Outcomes one line per op; a failed batch's error once, wrapped, not repeated per op."""
    lines = [f"{', '.join(result.batch_ids) or 'nothing to flush'}: {result.status}"]
    for outcome in result.outcomes:
        reason = outcome.reason
        if result.error and reason.startswith("batch failed"):
            reason = "(the batch failed: error below)"
        lines.extend(_wrapped(f"  {outcome.op_id:<16} {outcome.op_type:<7} {outcome.branch:<30} "
                              f"{outcome.status} ", reason))
    for error in filter(None, result.error.split("; batch-")):
        lines.extend(
            _wrapped("  error: ", error if error.startswith("batch-") else f"batch-{error}"))
    return "\n".join(lines)


def format_git_status(workflow_id: str, status: GitBatchStatus) -> str:
    s = status.stats
    lines = [f"{workflow_id}: {status.config.repo} -> {status.config.remote} (run {status.runs})",
             f"  queued ops {len(status.queue)}, pending batches {len(status.pending_batches)}, "
             f"failed batches {len(status.failed_batches)}, rejected ops {s.rejected_ops}",
             f"  ops {s.total_ops}, batches {s.total_batches}, avg {s.avg_ops_per_batch:.1f} "
             f"ops/batch, pushes {s.pushes}, round trips saved {s.network_savings}, "
             f"{s.total_execute_seconds:.2f}s pushing"]
    if status.executing:
        lines.append(f"  executing {status.executing.id} ({len(status.executing.ops)} ops)")
    for batch in status.executed_batches[-5:]:
        failed = [o for o in batch.outcomes if o.status == "failed"]
        lines.append(f"  {batch.id}: {len(batch.ops)} ops, {batch.status}, {len(failed)} failed")
        lines.extend(f"    {o.op_id} {o.branch}: {o.reason}" for o in failed)
    for batch in status.failed_batches:
        lines.extend(_wrapped(f"  FAILED {batch.id} ({len(batch.ops)} ops, {batch.attempts} "
                              "attempts): ", batch.error))
    for rejected in status.rejected[-5:]:
        lines.append(f"  rejected {json.dumps(rejected.op)}: {rejected.reason}")
    return "\n".join(lines)


async def git_status(args: argparse.Namespace) -> int:
    client = await client_for(args)
    gb = _batcher(args, client)
    status = await ask(gb.status(), "git batcher", gb.workflow_id, os.path.abspath(args.repo))
    print(to_json(status) if args.json else format_git_status(gb.workflow_id, status))
    return 0


async def git_id(args: argparse.Namespace) -> int:
    print(git_batch_workflow_id(os.path.abspath(args.repo), args.remote, args.task_queue))
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    git = sub.add_parser("git",
                         help="send git ops to a repository's GitBatchWorkflow").add_subparsers(
                             dest="git_command", required=True)

    enqueue = git.add_parser(
        "enqueue", help="queue one op (starts the batcher if needed)",
        **examples("taskfleet git enqueue feature/a --repo /srv/clone",
                   "taskfleet git enqueue feature/a --repo /srv/clone --op-type merge "
                   "--target main --wait",
                   "taskfleet git enqueue feature/a --repo /srv/clone --op-type commit "
                   "--worktree /srv/wt --message 'fix: typo'"))
    enqueue.add_argument("branch_arg", nargs="?", metavar="branch",
                         help="the branch the op lands (push, merge) or commits on")
    enqueue.add_argument("--branch", default="", help=argparse.SUPPRESS)  # the older spelling
    add_clone_flags(enqueue)
    enqueue.add_argument("--op-type", choices=["commit", "push", "merge"], default="push",
                         help="push the branch, merge it into --target, or commit a worktree's "
                              "changes (default push)")
    enqueue.add_argument("--message", help="commit: the commit message")
    enqueue.add_argument("--file", action="append",
                         help="commit: a file to stage (repeat); default: all changes")
    enqueue.add_argument("--worktree", help="commit: where the changes are")
    enqueue.add_argument(
        "--target", help="merge: the branch merged into (default: the remote's default branch)")
    enqueue.add_argument("--id", help="op id; a repeated id is ignored")
    enqueue.add_argument("--reply-to", help="workflow id told the outcome (signal git_ops_landed)")
    enqueue.add_argument("--op-json", help="the whole op as a JSON object instead of flags")
    enqueue.add_argument("--wait", action="store_true",
                         help="use the submit update: wait for accept/refuse")
    add_batch_flags(enqueue, 10, 5.0, "ops",
                    old_names=("--max-batch-size", "--max-batch-age-seconds"))
    enqueue.add_argument(
        "--atomic", action="store_true",
        help="the refs of a batch move together or not at all, if this starts the batcher")
    enqueue.set_defaults(func=git_enqueue)

    flush = git.add_parser("flush", help="land what is queued now", **examples(
        "taskfleet git flush --repo /srv/clone --wait",
        "taskfleet git flush --repo /srv/clone --remote upstream --json"))
    add_clone_flags(flush)
    flush.add_argument("--wait", action="store_true",
                       help="use flush_now: wait for the push and print outcomes")
    add_json_flag(flush, "the outcomes (with --wait)")
    flush.set_defaults(func=git_flush)

    retry = git.add_parser("retry", help="try a failed batch again and print its outcomes",
                           **examples("taskfleet git retry batch-7 --repo /srv/clone"))
    retry.add_argument("batch_id", help="a failed batch's id, as `git status` lists it")
    add_clone_flags(retry)
    add_json_flag(retry, "the outcomes")
    retry.set_defaults(func=git_retry)

    status = git.add_parser("status", help="queue, batches, failures, rejections and stats",
                            **examples("taskfleet git status --repo /srv/clone",
                                       "taskfleet git status --repo /srv/clone --json"))
    add_clone_flags(status)
    add_json_flag(status, "the status")
    status.set_defaults(func=git_status)

    ident = git.add_parser("id", help="print the batcher's workflow id for a clone and remote",
                           **examples("taskfleet git id --repo /srv/clone",
                                      "taskfleet git id --repo /srv/clone --remote upstream"))
    add_clone_flags(ident)
    ident.set_defaults(func=git_id)
