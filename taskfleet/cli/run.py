"""`taskfleet run|status|cancel`: start a board, follow it, stop it."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict
from typing import Any

from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError

from taskfleet.cli.common import client_for
from taskfleet.clients.orchestrator import progress, start_board
from taskfleet.core.boards import BoardError, load_board
from taskfleet.core.models.orchestrator import OrchestratorProgress, OrchestratorResult


def progress_line(p: OrchestratorProgress, total: int, width: int = 30) -> str:
    c = p.counts
    finished = c["succeeded"] + c["failed"] + c["cancelled"]
    filled = int(width * finished / total) if total else width
    return (
        f"[{'#' * filled}{'.' * (width - filled)}] {finished}/{total} done, {c['failed']} failed, "
        f"{c['running']} running, {c['landed']} landed, {p.pushes} push(es)"
    )


def summary_table(result: OrchestratorResult) -> str:
    rows = [("task", "status", "landed", "seconds", "commit", "reason")]
    for t in result.tasks:
        rows.append((t.id, t.status + (" (cached)" if t.cache_hit else ""), "yes" if t.landed else "no",
                     f"{t.seconds:.2f}", t.commit[:10], t.reason[:60]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    s = result.stats
    lines.append("")
    lines.append(
        f"wall {s.wall_seconds:.2f}s, task time {s.task_seconds:.2f}s, speed-up {s.speedup:.2f}x, "
        f"pushes {s.pushes} (saved {s.network_savings}), cache hits {s.cache_hits}, "
        f"history runs {s.runs} (largest {s.largest_history_length} events)"
    )
    if s.llm_requests:
        lines.append(
            f"Claude: {s.llm_requests} request(s) in {s.llm_api_calls} API call(s), tokens in {s.llm_input_tokens} "
            f"(cache read {s.llm_cache_read_tokens}) out {s.llm_output_tokens}, est. ${s.llm_cost_usd:.4f}"
        )
    return "\n".join(lines)


async def watch(handle: WorkflowHandle, total: int, show: bool) -> OrchestratorResult:
    """Wait for the result, drawing a progress line meanwhile (when `show`)."""
    result_task = asyncio.ensure_future(handle.result())
    while not result_task.done():
        if show:
            try:
                line = progress_line(await progress(handle), total)
                print(f"\r{line}", end="", file=sys.stderr, flush=True)
            except RPCError:
                pass
        await asyncio.wait({result_task}, timeout=0.5)
    if show:
        print(file=sys.stderr)
    return result_task.result()


def _board_overrides(args: argparse.Namespace) -> dict[str, Any]:
    out = {"run": args.run, "verify": args.verify, "base": args.base, "land": args.land,
           "implementer": getattr(args, "implementer", None), "model": getattr(args, "model", None)}
    if args.max_parallel:
        out["max_parallel"] = args.max_parallel
    return out


async def run_board(args: argparse.Namespace) -> int:
    try:
        board = load_board(args.board, **_board_overrides(args))
    except BoardError as err:
        print(f"taskfleet: board refused: {err}", file=sys.stderr)
        return 2
    client = await client_for(args)
    handle = await start_board(
        client, board, args.repo, task_queue=args.task_queue, remote=args.remote,
        max_parallel=args.max_parallel or 0,
        workflow_id=args.id or None,
    )
    open_tasks = sum(1 for t in board.tasks if not t.done)
    if not args.json:
        print(f"started {handle.id} ({open_tasks} tasks); `taskfleet status {handle.id}` to check on it", file=sys.stderr)
    try:
        result = await watch(handle, open_tasks, show=not args.json and sys.stderr.isatty())
    except WorkflowFailureError as err:
        print(f"taskfleet: {handle.id} did not complete: {err.cause or err}", file=sys.stderr)
        return 1
    print(json.dumps(asdict(result), indent=2) if args.json else summary_table(result))
    return 0 if all(t.status == "succeeded" for t in result.tasks) else 1


async def status(args: argparse.Namespace) -> int:
    client = await client_for(args)
    handle = client.get_workflow_handle(args.workflow_id)
    try:
        description = await handle.describe()
        p = await progress(handle)
    except RPCError as err:
        print(f"taskfleet: no run {args.workflow_id}: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"status": description.status.name if description.status else "", **asdict(p)}, indent=2))
        return 0
    print(f"{args.workflow_id}: {description.status.name if description.status else '?'}")
    print(progress_line(p, len(p.tasks)))
    for t in p.tasks:
        print(f"  {t.id:<20} {t.status:<10} {'landed' if t.landed else ''}")
    return 0


async def cancel(args: argparse.Namespace) -> int:
    client = await client_for(args)
    try:
        await client.get_workflow_handle(args.workflow_id).cancel()
    except RPCError as err:
        print(f"taskfleet: cannot cancel {args.workflow_id}: {err}", file=sys.stderr)
        return 1
    print(f"cancellation requested for {args.workflow_id}: running tasks are stopped and their worktrees removed")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="run a board (markdown or TOML) on a repository")
    run.add_argument("board", help="tasks/board-*.md or a .toml board")
    run.add_argument("--repo", required=True, help="the clone the tasks branch from (path on the worker)")
    run.add_argument("--remote", default="origin")
    run.add_argument("--max-parallel", type=int, default=0)
    run.add_argument("--run", help="executor command for a markdown board")
    run.add_argument("--verify", help="verification command for a markdown board")
    run.add_argument("--base", help="base branch (markdown board; default main)")
    run.add_argument("--land", choices=["push", "merge"], help="push task branches, or merge them into base")
    run.add_argument("--implementer", choices=["anthropic"], help="markdown board: Claude makes each change")
    run.add_argument("--model", help="Claude model id for implementer anthropic (default: TASKFLEET_MODEL)")
    run.add_argument("--id", help="workflow id (default taskfleet-run-<board>-<random>)")
    run.add_argument("--json", action="store_true", help="print the result object")
    run.set_defaults(func=run_board)

    st = sub.add_parser("status", help="progress of a board run")
    st.add_argument("workflow_id")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=status)

    cn = sub.add_parser("cancel", help="cancel a board run")
    cn.add_argument("workflow_id")
    cn.set_defaults(func=cancel)
