"""`taskfleet queue add|status|flush|id`: drive a target branch's `MergeQueueWorkflow`."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import textwrap
import time

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
from taskfleet.clients.merge_queue import MergeQueueClient, merge_queue_workflow_id
from taskfleet.clients.preflight import clone_top, has_branch
from taskfleet.clients.search_attributes import ensure_search_attributes
from taskfleet.core.default_branch import default_branch
from taskfleet.core.merge_queue_validation import queue_numbers_problem, speculation_problem
from taskfleet.core.models.merge_queue import (
    EntryOutcome,
    MergeQueueConfig,
    MergeQueueStatus,
    QueueEntry,
)


def _git(repo: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60, check=False)


def _target(args: argparse.Namespace, repo: str) -> str:
    name = args.target or default_branch(repo, args.remote)
    if not name:
        raise StartupError(
            f"cannot tell the default branch of {args.remote} in {repo}; pass --target")
    if args.target and not has_branch(repo, args.remote, name):
        raise StartupError(f"--target {name}: no such branch on {args.remote} (as {repo} last "
                           "fetched it) nor in the clone")
    return name


def _queue(args: argparse.Namespace, client: Client, repo: str,
           target: str = "") -> MergeQueueClient:
    # The queue's own settings matter only to a call that starts it (`add`).
    numbers = {k: getattr(args, k, d) for k, d in (("max_batch", 8), ("max_wait_seconds", 30.0),
                                                   ("parallel", 4), ("flake_retries", 1))}
    problem = (queue_numbers_problem(numbers["max_batch"], numbers["max_wait_seconds"], "--")
               or speculation_problem(numbers["parallel"], numbers["flake_retries"], "--"))
    if problem:
        raise StartupError(problem.replace("_", "-"))
    config = MergeQueueConfig(repo=repo, target=target or _target(args, repo), remote=args.remote,
                              verify=getattr(args, "verify", None) or "", **numbers)
    return MergeQueueClient(client, config, args.task_queue)


def _commit_of(repo: str, remote: str, branch: str) -> str:
    for ref in (f"refs/heads/{branch}", f"refs/remotes/{remote}/{branch}"):
        found = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if found.returncode == 0:
            return found.stdout.strip()
    raise StartupError(f"branch {branch!r} exists neither in {repo} nor on {remote}")


def _known_commit(repo: str, commit: str) -> str:
    if _git(repo, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        raise StartupError(f"--commit {commit}: no such commit in {repo}")
    return commit


async def queue_add(args: argparse.Namespace) -> int:
    repo = clone_top(args.repo, args.remote)
    if args.wait_timeout <= 0:
        raise StartupError(f"--wait-timeout must be above 0 seconds, got {args.wait_timeout:g}")
    expect = (_known_commit(repo, args.commit) if args.commit
              else _commit_of(repo, args.remote, args.branch))
    target = _target(args, repo)  # one that does not exist is refused before a queue starts
    entry = QueueEntry(branch=args.branch, expect_commit=expect,
                       id=args.id or "", reply_to=args.reply_to or "", verify=args.verify or "")
    client = await client_for(args)
    notice = await ensure_search_attributes(client)
    if notice:
        print(f"taskfleet: {notice}", file=sys.stderr)
    q = _queue(args, client, repo, target)
    try:
        entry_id = await q.submit(entry)
    except WorkflowUpdateFailedError as err:
        print(f"taskfleet: {getattr(err.cause, 'message', None) or err.cause}", file=sys.stderr)
        return 1
    print(f"queued {entry_id} ({args.branch} at {entry.expect_commit[:12]}) on {q.workflow_id}")
    if not args.wait:
        return 0
    outcome = await _wait_for(q, entry_id, args.wait_timeout)
    if outcome is None:
        print(f"taskfleet: no outcome for {entry_id} within {args.wait_timeout:g}s; "
              f"`taskfleet queue status --repo {args.repo}` shows where it is", file=sys.stderr)
        return 1
    print(format_outcome(outcome))
    return 0 if outcome.status == "landed" else 1


async def _wait_for(q: MergeQueueClient, entry_id: str, timeout: float) -> EntryOutcome | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = await q.status()
        for outcome in reversed(status.recent):
            if outcome.entry_id == entry_id:
                return outcome
        await asyncio.sleep(1.0)  # at a person's pace: this is a command line waiting, not a test
    return None


def format_outcome(o: EntryOutcome) -> str:
    lines = [
        f"{o.entry_id} ({o.branch}): {o.status}" + (f" at {o.commit[:12]}" if o.commit else "")]
    if o.reason:
        lines.extend(textwrap.wrap(o.reason, 100, initial_indent="  ", subsequent_indent="  "))
    if o.output_tail:
        lines.append("  verify output (tail):")
        lines.extend(f"    {line}" for line in o.output_tail.splitlines()[-20:])
    return "\n".join(lines)


def format_queue_status(workflow_id: str, status: MergeQueueStatus) -> str:
    c, s = status.config, status.stats
    lines = [
        f"{workflow_id}: {c.repo} -> {c.remote}/{c.target} (run {status.runs}), tip "
        f"{status.target_tip[:12] or '?'}",
        f"  queued {len(status.queue)}, window {s.window or c.max_batch} (max {c.max_batch}, "
        f"culprit rate {s.culprit_rate}), verify runs in flight {s.in_flight} of {c.parallel}, "
        f"refused inputs {s.refused_inputs}",
        f"  landed {s.landed}, rejected {s.rejected}, conflicts {s.conflicts}; batches "
        f"{s.batches}, verify runs {s.verify_runs} ({s.verify_runs_per_landed} per landed), "
        f"bisection steps {s.bisection_steps}, pushes {s.pushes}, rebuilds {s.rebuilds}; time in "
        f"queue avg {s.queue_seconds_avg:.1f}s max {s.queue_seconds_max:.1f}s",
        f"  flaky runs {s.flaky_runs}, confirmation runs {s.confirm_runs}, cancelled runs "
        f"{s.cancelled_runs}; a culprit takes {s.red_runs_needed or c.flake_retries + 1} red runs "
        "of one merge"]
    for b in status.batches:
        on = f"on {b.stacked_on}" if b.stacked_on else "on the tip"
        part = f", part of {b.half_of}" if b.half_of else ""
        red = f", red {b.reds} time(s)" if b.reds else ""
        ids = ", ".join(e.id for e in b.entries[:6]) + (" ..." if len(b.entries) > 6 else "")
        lines.append(f"  {b.lane:<8} {b.id} {b.stage}{red}, {len(b.entries)} entries {on}{part}: "
                     f"{ids}")
    if status.in_flight and not status.batches:
        b = status.in_flight
        lines.append(f"  in flight: {b.id} ({len(b.entries)} entries, {b.stage})"
                     + (f", half of {b.half_of}" if b.half_of else ""))
        for batch in status.halves:
            ids = ", ".join(e.id for e in batch.entries[:8])
            lines.append(f"  waiting half {batch.id} of {batch.half_of}: {ids}")
    for entry in status.queue[:10]:
        lines.append(f"  queued {entry.id} ({entry.branch} at {entry.expect_commit[:12]})")
    if len(status.queue) > 10:
        lines.append(f"  ... and {len(status.queue) - 10} more queued")
    if status.last_error:
        lines.append(f"  last error (trying again at {status.retry_at}): {status.last_error}")
    for outcome in status.recent[-10:]:
        lines.append(
            f"  {outcome.status:<8} {outcome.entry_id} ({outcome.branch}) {outcome.reason[:100]}")
    for refused in status.rejected[-5:]:
        lines.append(f"  refused ({refused.handler}): {refused.reason}")
    return "\n".join(lines)


async def queue_status(args: argparse.Namespace) -> int:
    repo = clone_top(args.repo, args.remote)  # a missing folder is named as such
    client = await client_for(args)
    q = _queue(args, client, repo)
    status = await ask(q.status(), "merge queue", q.workflow_id)
    print(to_json(status) if args.json else format_queue_status(q.workflow_id, status))
    return 0


async def queue_flush(args: argparse.Namespace) -> int:
    repo = clone_top(args.repo, args.remote)  # a missing folder is named as such
    client = await client_for(args)
    q = _queue(args, client, repo)
    await ask(q.flush(), "merge queue", q.workflow_id)
    print(f"flush requested on {q.workflow_id}")
    return 0


async def queue_id(args: argparse.Namespace) -> int:
    repo = clone_top(args.repo, args.remote)  # a missing folder is named as such
    print(merge_queue_workflow_id(repo, args.remote, _target(args, repo), args.task_queue))
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser(
        "queue", help="land branches through a target branch's merge queue").add_subparsers(
            dest="queue_command", required=True)

    def target(p: argparse.ArgumentParser) -> None:
        add_clone_flags(p)
        p.add_argument("--target",
                       help="the branch kept green (default: the remote's default branch)")

    add = group.add_parser(
        "add", help="queue a branch (its current commit) to land on the target",
        **examples("taskfleet queue add feature/a --repo /srv/clone --verify 'make test'",
                   "taskfleet queue add feature/b --repo /srv/clone --target release --wait"))
    add.add_argument("branch",
                     help="the branch to land (its commit in the clone, or on the remote)")
    target(add)
    add.add_argument("--verify", help="command run on each merged batch holding this entry (also "
                                      "the queue's default, if this starts the queue)")
    add_batch_flags(add, 8, 30.0, "entries")
    add.add_argument("--parallel", type=int, default=4,
                     help="verify runs at once, if this starts the queue (default 4)")
    add.add_argument("--flake-retries", type=int, default=1,
                     help="runs again of a red entry's merge before it is a culprit, if this "
                          "starts the queue (default 1)")
    add.add_argument("--commit",
                     help="the commit to land (default: the branch's commit in the clone)")
    add.add_argument("--id",
                     help="entry id (default: given by the queue); a repeated id is ignored")
    add.add_argument("--reply-to", help="workflow id told the outcome (signal queue_outcomes)")
    add.add_argument("--wait", action="store_true",
                     help="wait for the outcome and print it (exit 1 unless landed)")
    add.add_argument("--wait-timeout", type=float, default=3600.0,
                     help="with --wait: give up after this many seconds (default 3600; exit 1)")
    add.set_defaults(func=queue_add)

    status = group.add_parser(
        "status",
        help="queued entries, the batches in flight and what each is stacked on, flaky runs, "
             "recent outcomes and stats",
        **examples("taskfleet queue status --repo /srv/clone",
           "taskfleet queue status --repo /srv/clone --target release --json"))
    target(status)
    add_json_flag(status, "the status")
    status.set_defaults(func=queue_status)

    flush = group.add_parser("flush", help="start batches now for everything queued", **examples(
        "taskfleet queue flush --repo /srv/clone"))
    target(flush)
    flush.set_defaults(func=queue_flush)

    ident = group.add_parser("id",
                             help="print the queue's workflow id for a clone, remote and target",
                             **examples("taskfleet queue id --repo /srv/clone --target main"))
    target(ident)
    ident.set_defaults(func=queue_id)
