"""`taskfleet run|status|cancel`: start a board, follow it, stop it."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import textwrap
import time
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from taskfleet.cli.common import client_for, examples, not_a_run
from taskfleet.clients.board_start import BoardRun, start_board_file
from taskfleet.clients.orchestrator import progress
from taskfleet.clients.pollers import MISSING, WORKING, run_worker_state
from taskfleet.clients.run_store import RunStoreError, write_result_json, write_status_json
from taskfleet.core.boards import BoardError
from taskfleet.core.models.orchestrator import (
    OrchestratorProgress,
    OrchestratorResult,
    OrchestratorStats,
    TaskOutcome,
    TaskProgress,
)
from taskfleet.core.names import ORCHESTRATOR_WORKFLOW


def progress_line(p: OrchestratorProgress, total: int, width: int = 30) -> str:
    c = p.counts
    finished = c["succeeded"] + c["failed"] + c["cancelled"]
    filled = int(width * finished / total) if total else width
    cancelled = f", {c['cancelled']} cancelled" if c["cancelled"] else ""
    return (
        f"[{'#' * filled}{'.' * (width - filled)}] {finished}/{total} done, {c['failed']} failed"
        f"{cancelled}, {c['running']} running, {c['landed']} landed, {p.pushes} push(es)"
    )


def summary_table(result: OrchestratorResult, reason_width: int = 60) -> str:
    """One row per task; a reason longer than the column is cut there and given in full below."""
    judged = any(t.verdict for t in result.tasks)
    rows = [("task", "status", "landed", "seconds", "commit",
             *(("verdict",) if judged else ()), "reason")]
    long_reasons: list[TaskOutcome] = []
    for t in result.tasks:
        reason = " ".join(t.reason.split())
        if len(reason) > reason_width:
            long_reasons.append(t)
            reason = reason[: reason_width - 12] + "... (below)"
        rows.append(
            (t.id, t.status + (" (cached)" if t.cache_hit else ""), "yes" if t.landed else "no",
             f"{t.seconds:.2f}", t.commit[:10], *((t.verdict or "-",) if judged else ()), reason))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    for t in long_reasons:
        lines.append("")
        lines.append(f"{t.id}: " + (f"(log: {t.log_path})" if t.log_path else ""))
        lines.extend(textwrap.indent(textwrap.fill(para, 100) if para else "", "  ")
                     for para in t.reason.splitlines())
    s = result.stats
    lines.append("")
    lines.append(
        f"wall {s.wall_seconds:.2f}s, task time {s.task_seconds:.2f}s, speed-up {s.speedup:.2f}x, "
        f"pushes {s.pushes} (saved {s.network_savings}), cache hits {s.cache_hits}, "
        f"history runs {s.runs} (largest {s.largest_history_length} events)"
    )
    if s.llm_requests:
        lines.append(f"Claude: {s.llm_requests} request(s) in {s.llm_api_calls} API call(s), "
                     f"tokens in {s.llm_input_tokens} (cache read {s.llm_cache_read_tokens}) out "
                     f"{s.llm_output_tokens}, est. ${s.llm_cost_usd:.4f}")
    if s.agent_reports:
        lines.append(f"agents: {s.agent_reports} usage report(s), tokens in {s.agent_input_tokens} "
                     f"out {s.agent_output_tokens}, ${s.agent_cost_usd:.4f} as reported")
    lines.extend(queue_line(s))
    line = judge_line(s)
    if line:
        lines.append(line)
    return "\n".join(lines)


def queue_line(s: OrchestratorStats) -> list[str]:
    """The merge queue's figures for this run's entries (land = "queue") as one line, or ""."""
    if not (s.queue_landed or s.queue_rejected or s.queue_conflicts):
        return []
    return [f"merge queue: {s.queue_landed} landed, {s.queue_rejected} rejected, "
            f"{s.queue_conflicts} conflict(s), {s.queue_resubmits} sent back and redone; "
            f"{s.queue_verify_runs} verify run(s), {s.queue_bisection_steps} bisection step(s), "
            f"{s.pushes} push(es); {s.queue_seconds:.1f}s in queue (summed)"]


def judge_line(s: OrchestratorStats) -> str:
    """The judge's figures of a run, or "" when no task had a judge."""
    verdicts = s.judge_approved + s.judge_revised + s.judge_rejected
    if not verdicts and not s.judge_calls and not s.judge_invalid:
        return ""
    return (f"Judge: {verdicts} verdict(s) (approve {s.judge_approved}, revise {s.judge_revised}, "
            f"reject {s.judge_rejected}) from {s.judge_calls} call(s) in {s.judge_api_calls} API "
            f"call(s), {s.judge_cache_hits} from the cache, {s.judge_invalid} answer(s) off the "
            f"schema; tokens in {s.judge_input_tokens} out {s.judge_output_tokens}, est. "
            f"${s.judge_cost_usd:.4f}")


def progress_of_result(result: OrchestratorResult) -> OrchestratorProgress:
    """The progress a finished run would answer, from its result: no query, no worker needed."""
    counts = {
        name: 0 for name in ("pending", "running", "succeeded", "failed", "cancelled", "landed")}
    if result.counts:  # a paged run counts every task, listed or not
        counts.update(result.counts)
    else:
        for t in result.tasks:
            counts[t.status] = counts.get(t.status, 0) + 1
            counts["landed"] += t.landed
    return OrchestratorProgress(
        counts=counts, running=[],
        tasks=[TaskProgress(t.id, t.status, t.landed, t.reason, verdict=t.verdict)
               for t in result.tasks],
        pushes=result.stats.pushes, run_ref=result.run_ref, repo=result.repo,
        total=sum(counts[name]
                  for name in ("pending", "running", "succeeded", "failed", "cancelled")),
        failed_ids=list(result.failed_ids))


def run_succeeded(result: OrchestratorResult) -> bool:
    """No task failed or was cancelled, and every commit a task made landed (a landing that timed
    out leaves the task succeeded but its work off the remote)."""
    if any(t.status == "succeeded" and t.commit and not t.landed for t in result.tasks):
        return False
    if result.counts:
        return result.counts.get("failed", 0) == 0 and result.counts.get("cancelled", 0) == 0
    return all(t.status == "succeeded" for t in result.tasks)


def big_run_summary(result: OrchestratorResult, workflow_id: str) -> str:
    """A run too big to list task by task: its counts, the first failed ids, where the rest is."""
    c = result.counts
    s = result.stats
    lines = [f"{c.get('succeeded', 0)} succeeded, {c.get('failed', 0)} failed, "
             f"{c.get('cancelled', 0)} cancelled, {c.get('landed', 0)} landed"]
    if result.failed_ids:
        more = c.get("failed", 0) + c.get("cancelled", 0) - len(result.failed_ids)
        lines.append(
            "failed: " + ", ".join(result.failed_ids) + (f" and {more} more" if more > 0 else ""))
    lines.append(f"every task's outcome: `taskfleet status {workflow_id} --json` (run store "
                 f"{result.run_ref})")
    lines.append("")
    lines.append(
        f"wall {s.wall_seconds:.2f}s, task time {s.task_seconds:.2f}s, speed-up {s.speedup:.2f}x, "
        f"pushes {s.pushes} (saved {s.network_savings}), cache hits {s.cache_hits}, "
        f"history runs {s.runs} (largest {s.largest_history_length} events)"
    )
    lines.extend(queue_line(s))
    if judge_line(s):
        lines.append(judge_line(s))
    return "\n".join(lines)


def _summary(result: OrchestratorResult, workflow_id: str) -> str:
    listed = not result.run_ref or len(result.tasks) >= result.recorded
    return summary_table(result) if listed else big_run_summary(result, workflow_id)


def _connection_flags(args: argparse.Namespace) -> str:
    """The connection flags this command was given, for commands we suggest to the user."""
    return "".join(f" --{name} {value}" for name, value in (("address", args.address),
                                                            ("namespace", args.namespace)) if value)


def _how_to_follow(args: argparse.Namespace, workflow_id: str) -> str:
    flags = _connection_flags(args)
    return (f"follow it with `taskfleet{flags} status {workflow_id}`, "
            f"cancel it with `taskfleet{flags} cancel {workflow_id}`")


async def _notice_without_worker(client: Client, handle: WorkflowHandle, task_queue: str,
                                 flags: str = "", notice_after: float = 3.0) -> None:
    """Say (once, on stderr) when no worker takes the run's workflow tasks, and when one does."""
    deadline = time.monotonic() + notice_after
    said = False
    while True:
        try:
            state = await run_worker_state(client, handle, task_queue, notice_after)
        except RPCError:
            return  # no permission to describe: stay quiet rather than guess
        if state == WORKING:
            if said:
                print(f"taskfleet: a worker polls {task_queue} now", file=sys.stderr, flush=True)
            return
        if state == MISSING and not said and time.monotonic() >= deadline:
            print(f"taskfleet: no worker polls task queue {task_queue!r}; the run waits until one "
                  f"does (start one: `taskfleet-worker{flags} --task-queue {task_queue}`). Still "
                  "waiting...", file=sys.stderr, flush=True)
            said = True
        await asyncio.sleep(1.0)  # at a person's pace, not test synchronization


async def watch(
    handle: WorkflowHandle, total: int, show: bool, stop: asyncio.Event | None = None
) -> OrchestratorResult | None:
    """The result, with a progress line drawn meanwhile (with `show`); None once `stop` is set."""
    result_task = asyncio.ensure_future(handle.result())
    stop_task = asyncio.ensure_future((stop or asyncio.Event()).wait())
    try:
        while not result_task.done() and not stop_task.done():
            if show:
                try:
                    line = progress_line(await progress(handle, rpc_timeout=timedelta(seconds=2)),
                                         total)
                    print(f"\r{line}", end="", file=sys.stderr, flush=True)
                except RPCError:
                    pass
            await asyncio.wait({result_task, stop_task}, timeout=0.5,
                               return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop_task.cancel()
    if not result_task.done():
        result_task.cancel()
        if show:
            print(file=sys.stderr)
        return None
    result = result_task.result()
    if show:  # the last line drawn may predate the end: redraw from the result
        print(f"\r{progress_line(progress_of_result(result), total)}", file=sys.stderr, flush=True)
    return result


def _board_overrides(args: argparse.Namespace) -> dict[str, Any]:
    out = {"run": args.run, "verify": args.verify, "base": args.base, "land": args.land,
           "implementer": getattr(args, "implementer", None), "model": getattr(args, "model", None),
           "judge": getattr(args, "judge", None), "judge_run": getattr(args, "judge_run", None)}
    if args.max_parallel is not None:  # 0 or less is refused by the board's own check
        out["max_parallel"] = args.max_parallel
    return out


def _say(notice: str) -> None:
    print(f"taskfleet: {notice}", file=sys.stderr)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2), flush=True)


async def run_board(args: argparse.Namespace) -> int:
    run = BoardRun(path=args.board, repo=args.repo, remote=args.remote,
                   overrides=_board_overrides(args), check_clone=not args.no_check,
                   address=args.address, namespace=args.namespace, task_queue=args.task_queue,
                   max_parallel=args.max_parallel or 0, workflow_id=args.id or None)
    try:
        started = await start_board_file(run, _say)
    except BoardError as err:
        print(f"taskfleet: board refused: {err}", file=sys.stderr)
        return 2
    except WorkflowAlreadyStartedError:
        print(f"taskfleet: a run with id {args.id} is still running; "
              f"{_how_to_follow(args, args.id)}, or pick another --id", file=sys.stderr)
        return 2
    client, handle, open_tasks = started.client, started.handle, started.open_tasks
    if not args.json:
        print(f"started {handle.id} ({open_tasks} tasks); `taskfleet{_connection_flags(args)} "
              f"status {handle.id}` to check on it", file=sys.stderr)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, stop.set)
    pollers = asyncio.ensure_future(
        _notice_without_worker(client, handle, args.task_queue, _connection_flags(args)))
    failed: WorkflowFailureError | None = None
    try:
        result = await watch(handle, open_tasks,
                             show=not args.json and sys.stderr.isatty(), stop=stop)
    except WorkflowFailureError as err:
        failed, result = err, None
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        pollers.cancel()
    if failed is not None:
        # The cause's own message: its str() repeats its type.
        reason = getattr(failed.cause, "message", None) or str(failed.cause or failed)
        print(f"taskfleet: {handle.id} did not complete: {reason}", file=sys.stderr)
        await _show_closed(args, handle)
        return 1
    if result is None:
        print(f"taskfleet: stopped watching {handle.id}; the run goes on without this command: "
              f"{_how_to_follow(args, handle.id)}", file=sys.stderr, flush=True)
        return 130
    try:
        if args.json:
            write_result_json(sys.stdout, result, workflow_id=handle.id)
            sys.stdout.flush()
        else:
            print(_summary(result, handle.id), flush=True)
    except RunStoreError as err:
        print(
            f"\ntaskfleet: {handle.id} finished, but its outcomes cannot be read from here: {err}",
            file=sys.stderr)
        return 2
    return 0 if run_succeeded(result) else 1


async def _show_closed(args: argparse.Namespace, handle: WorkflowHandle) -> None:
    """After a run closed without a result (cancelled, say): what ran and landed, as `status`."""
    p = await _closed_progress(handle, getattr(args, "query_timeout", 5.0))
    description = await handle.describe()
    state = description.status.name if description.status else "UNKNOWN"
    if p is None:  # no worker answered: what `status --json` says then
        if args.json:
            _print_json({**_unanswered(state), "workflow_id": handle.id})
        return
    if args.json:
        try:
            write_status_json(sys.stdout, state, p, workflow_id=handle.id)
            sys.stdout.flush()
        except RunStoreError as err:
            print(f"taskfleet: {handle.id}: its outcomes cannot be read from here: {err}",
                  file=sys.stderr)
        return
    print(progress_line(p, p.total or len(p.tasks)), file=sys.stderr)


async def status(args: argparse.Namespace) -> int:
    """A closed run answers from its result (no worker needed); a running one from its query."""
    client = await client_for(args)
    handle = client.get_workflow_handle(args.workflow_id, result_type=OrchestratorResult)
    try:
        description = await handle.describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return _cannot_ask(args, f"no run {args.workflow_id} in namespace {client.namespace}")
        return _cannot_ask(args, f"cannot describe {args.workflow_id}: {err.message}")
    if description.workflow_type != ORCHESTRATOR_WORKFLOW:
        return _cannot_ask(args, not_a_run(args.workflow_id, description.workflow_type))
    state = description.status.name if description.status else "UNKNOWN"
    result: OrchestratorResult | None = None
    if description.status == WorkflowExecutionStatus.COMPLETED:
        result = await handle.result(follow_runs=False)
        p = progress_of_result(result)
    elif description.status == WorkflowExecutionStatus.RUNNING:
        try:
            p = await progress(handle, rpc_timeout=timedelta(seconds=args.query_timeout))
        except RPCError as err:
            print(f"{args.workflow_id}: RUNNING, but no worker answered its progress query within "
                  f"{args.query_timeout:.0f}s (is a worker polling {description.task_queue}?): "
                  f"{err.message}", file=sys.stderr)
            return 2
    else:
        # Cancelled, failed, terminated: no result, but a worker answers the query from the history.
        p = await _closed_progress(handle, args.query_timeout)
        if p is None:
            print(f"{args.workflow_id}: {state} (closed at {description.close_time}); "
                  "no result to show"
                  + (" (`temporal workflow show --workflow-id ...` has the history)"
                     if not args.json else ""), file=sys.stderr)
            if args.json:
                _print_json(_unanswered(state))
            return 1
    if args.json:
        try:  # every task's outcome, streamed from the run store
            write_status_json(sys.stdout, state, p, result)
            sys.stdout.flush()
        except RunStoreError as err:
            print(f"\ntaskfleet: {args.workflow_id}: its outcomes cannot be read from here: {err}",
                  file=sys.stderr)
            return 2
        return _status_exit(description.status, p, result)
    print(f"{args.workflow_id}: {state}")
    print(progress_line(p, p.total or len(p.tasks)))
    if result is not None:
        print(_summary(result, args.workflow_id))
    else:
        for t in p.tasks:
            print(f"  {t.id:<20} {t.status:<10} {t.stage:<12} "
                  f"{('verdict ' + t.verdict) if t.verdict else '':<16} "
                  f"{'landed' if t.landed else ''}".rstrip())
    return _status_exit(description.status, p, result)


def _cannot_ask(args: argparse.Namespace, reason: str) -> int:
    """`status` of a run it cannot ask about: one line (a JSON object with --json), exit 2."""
    print(f"taskfleet: {reason}", file=sys.stderr)
    if args.json:
        _print_json({"workflow_id": args.workflow_id, "error": reason})
    return 2


def _unanswered(state: str) -> dict[str, Any]:
    """`status --json` of a closed run whose progress no worker answered: its state, no tasks."""
    return {"status": state, "counts": {}, "running": [], "tasks": [], "pushes": 0}


def _status_exit(status: WorkflowExecutionStatus | None, p: OrchestratorProgress,
                 result: OrchestratorResult | None = None) -> int:
    """As `run` exits: 0 while no task failed or was cancelled (and, once done, every commit
    landed), 1 once one did or when the run closed without a result; 2 is for not being able to
    ask."""
    if status not in (WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.RUNNING):
        return 1
    if result is not None and not run_succeeded(result):
        return 1
    return 1 if p.counts.get("failed", 0) or p.counts.get("cancelled", 0) else 0


async def _closed_progress(handle: WorkflowHandle, timeout: float) -> OrchestratorProgress | None:
    """A closed run's `progress` (a worker replays its history to answer), or None without one."""
    try:
        return await progress(handle, rpc_timeout=timedelta(seconds=timeout))
    except (RPCError, WorkflowQueryFailedError):
        return None


async def cancel(args: argparse.Namespace) -> int:
    client = await client_for(args)
    handle = client.get_workflow_handle(args.workflow_id)
    try:
        description = await handle.describe()
        if description.workflow_type != ORCHESTRATOR_WORKFLOW:
            print(f"taskfleet: {not_a_run(args.workflow_id, description.workflow_type)}; "
                  "nothing cancelled", file=sys.stderr)
            return 2
        if description.status != WorkflowExecutionStatus.RUNNING:
            state = description.status.name if description.status else "UNKNOWN"
            print(f"taskfleet: {args.workflow_id} is {state} already (closed at "
                  f"{description.close_time}); nothing to cancel", file=sys.stderr)
            return 1
        await handle.cancel()
    except RPCError as err:
        print(f"taskfleet: cannot cancel {args.workflow_id}: {err.message}", file=sys.stderr)
        return 2
    print(f"cancellation requested for {args.workflow_id}: running tasks are stopped and their "
          "worktrees removed")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="run a board (markdown or TOML) on a repository", **examples(
        "taskfleet run board.toml --repo /srv/clone",
        "taskfleet run tasks/board.md --repo /srv/clone --verify 'make test' --max-parallel 8",
        "taskfleet run tasks/board.md --repo /srv/clone --implementer anthropic --judge anthropic "
        "--land queue", "taskfleet run board.toml --repo /srv/clone --no-check --json"))
    run.add_argument("board", help="tasks/board-*.md or a .toml board")
    run.add_argument("--repo", required=True,
                     help="the clone the tasks branch from (path on the worker)")
    run.add_argument("--remote", default="origin", help="the remote tasks land on (default origin)")
    run.add_argument(
        "--max-parallel", type=int, default=None,
        help="at most this many tasks at once (overrides the board's max_parallel; default 4)")
    run.add_argument("--run", help="the executor command of every task (overrides the board's run)")
    run.add_argument("--verify", help="the verification command (overrides the board's verify; a "
                                      "markdown task's own Verification cell still wins)")
    run.add_argument("--base", help="the branch tasks start from (overrides the board's base; "
                                    "default: the remote's default branch)")
    run.add_argument(
        "--land", choices=["push", "merge", "queue"],
        help="push task branches, merge them into base, or land them through base's merge queue")
    run.add_argument("--implementer", choices=["anthropic"],
                     help="Claude makes each change (overrides the board's implementer)")
    run.add_argument("--model",
                     help="Claude model id for implementer anthropic (default: TASKFLEET_MODEL)")
    run.add_argument("--judge", choices=["anthropic"],
                     help="Claude judges each change before it lands")
    run.add_argument("--judge-run", metavar="CMD",
                     help="a judge command (diff on stdin; exit 0 approve, 2 revise, else reject)")
    run.add_argument("--id", help="workflow id (default taskfleet-run-<board>-<random>)")
    run.add_argument("--json", action="store_true", help="print the result object")
    run.add_argument(
        "--no-check", action="store_true",
        help="skip checking --repo here (when the clone exists only on the worker's machine)")
    run.set_defaults(func=run_board)

    st = sub.add_parser("status", help="progress of a board run",
                        **examples("taskfleet status taskfleet-run-board-1a2b3c4d",
                                   "taskfleet status taskfleet-run-board-1a2b3c4d --json"))
    st.add_argument("workflow_id", help="the run's workflow id, as `run` printed it")
    st.add_argument("--json", action="store_true",
                    help="print the status, with every task's outcome, as JSON")
    st.add_argument("--query-timeout", type=float, default=5.0,
                    help="seconds to wait for a worker's answer")
    st.set_defaults(func=status)

    cn = sub.add_parser("cancel", help="cancel a board run", **examples(
        "taskfleet cancel taskfleet-run-board-1a2b3c4d"))
    cn.add_argument("workflow_id", help="the run's workflow id, as `run` printed it")
    cn.set_defaults(func=cancel)
