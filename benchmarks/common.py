"""Shared set-up for benchmarks: a real dev server and a worker with the plugin, in this process."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from taskfleet.clients.orchestrator import start_board  # noqa: E402
from taskfleet.core.default_branch import default_branch  # noqa: E402
from taskfleet.core.models.orchestrator import Board, OrchestratorResult  # noqa: E402
from taskfleet.core.search_attributes import ALL  # noqa: E402
from taskfleet.core.settings import TaskfleetSettings  # noqa: E402
from taskfleet.devserver.server import find_temporal_cli  # noqa: E402
from taskfleet.plugin import TaskfleetPlugin  # noqa: E402

# The dev server prints a banner on the stdout it inherits: keep fd 1 for our JSON alone.
_JSON_OUT = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)

for key, value in {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@taskfleet.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@taskfleet.invalid",
}.items():
    os.environ.setdefault(key, value)


EXTRA_SERVER_ARGS = [a for a in os.environ.get("BENCH_SERVER_ARGS", "").split() if a]


@asynccontextmanager
async def temporal_worker(task_queue: str, state_dir: Path,
                          **worker_kwargs) -> AsyncIterator[Client]:
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=find_temporal_cli(),
                                                search_attributes=ALL, dev_server_log_level="error",
                                                dev_server_extra_args=EXTRA_SERVER_ARGS)
    try:
        worker = Worker(
            env.client,
            task_queue=task_queue,
            plugins=[TaskfleetPlugin(TaskfleetSettings(state_dir=state_dir))],
            **worker_kwargs,
        )
        async with worker:
            yield env.client
    finally:
        await env.shutdown()


async def run_board(client: Client, board: Board, repo: Path, handles: list | None = None,
                    **options) -> tuple[OrchestratorResult, float]:
    """Start a board as `taskfleet run` does (stored in the clone, its base named: the remote's
    default branch when the board names none) and wait for its result; with the wall seconds from
    before the start to the result, as a user waits for it. `handles` gets the run's handle."""
    started = time.perf_counter()
    board.base = board.base or default_branch(str(repo)) or ""
    handle = await start_board(client, board, str(repo), **options)
    if handles is not None:
        handles.append(handle)
    result = await handle.result()
    return result, time.perf_counter() - started


async def landing_tail_seconds(handle) -> float:
    """From the run's last finished activity (its last task) to the run's end: what landing adds
    to the wall once every task is done (the run waits for its last pushes)."""
    last = end = None
    async for event in handle.fetch_history_events():
        kind = event.WhichOneof("attributes")
        if kind == "activity_task_completed_event_attributes":
            last = event.event_time.ToDatetime()
        elif kind == "workflow_execution_completed_event_attributes":
            end = event.event_time.ToDatetime()
    return (end - last).total_seconds() if last and end else 0.0


def cpu_seconds() -> dict[str, float]:
    """CPU used so far, by where it ran: this process (the worker, every thread: the event loop,
    `to_thread` work, workflow activations, the SDK's Rust core), the processes it started and
    reaped (task commands, git), and the dev server (a child still running: read from /proc)."""
    me, server = os.getpid(), 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == me and b"temporal" in Path(f"/proc/{pid}/cmdline").read_bytes():
                server += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    own, children = (resource.getrusage(resource.RUSAGE_SELF),
                     resource.getrusage(resource.RUSAGE_CHILDREN))
    return {"worker": own.ru_utime + own.ru_stime,
            "children": children.ru_utime + children.ru_stime, "server": server}


def cpu_ms_per_task(before: dict[str, float], after: dict[str, float],
                    tasks: int) -> dict[str, float]:
    spent = {key: (after[key] - before[key]) * 1000 / tasks for key in before}
    spent["total"] = sum(spent.values())
    return {key: round(value, 2) for key, value in spent.items()}


def emit(figures: dict) -> None:
    _JSON_OUT.write(json.dumps(figures, indent=2) + "\n")
    _JSON_OUT.flush()


def run(main: Callable[[], Awaitable[None]]) -> None:
    """`asyncio.run(main())`, then exit without interpreter finalization: the Temporal runtime's
    native threads may still be winding down, and CPython aborts if one touches the interpreter
    while it finalizes (as `taskfleet.worker.console_main` does)."""
    asyncio.run(main())
    _JSON_OUT.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
