"""Cancel latency: from `taskfleet cancel` (the workflow's cancel request) to the run closed, every
task's process group gone and every worktree removed, for tasks whose own timeout is an hour.

Tasks are cancelled after each has heartbeated once (the worst case: the SDK holds the next
heartbeat for its throttle interval, and a cancel reaches an activity only in a heartbeat's answer).
With the plugin's 1 s throttle and, in full mode, once with the SDK's throttle for comparison
(`max_heartbeat_throttle_interval` 59 s: min(0.8 x 30 s heartbeat timeout, 59 s) = 24 s).
Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from common import emit, run, temporal_worker
from temporalio.client import WorkflowFailureError
from temporalio.worker import Worker

from taskfleet.clients.orchestrator import start_board
from taskfleet.core.models.orchestrator import Board, TaskSpec
from taskfleet.core.settings import TaskfleetSettings
from taskfleet.plugin import TaskfleetPlugin
from taskfleet.testing import make_git_remote

TASK_QUEUE = "bench-cancel"


def processes_with_environ(entry: str) -> list[int]:
    """Live processes carrying `entry` (NAME=value) in their environment: a task's processes are
    found by a marker it exports (inside its PID namespace `$$` is not its pid on this machine)."""
    needle = b"\0" + entry.encode() + b"\0"
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as handle:
                    if needle in b"\0" + handle.read() + b"\0":
                        if (Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
                                != "Z"):
                            found.append(int(name))
            except (OSError, IndexError):
                pass
    return found


async def until(check, timeout: float = 120.0, interval: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(interval)


async def cancel_once(client, repo: Path, state: Path, scratch: Path, tasks: int,
                      task_queue: str) -> dict:
    pids = scratch / f"pids-{time.time_ns()}"
    pids.mkdir(parents=True)
    run = f'echo $$ > "{pids}/$TASKFLEET_TASK_ID"; export BENCH_CANCEL={pids.name}; exec sleep 3600'
    specs = [TaskSpec(id=f"c{i}", run=run, verify="true", timeout_seconds=3600)
             for i in range(tasks)]
    handle = await start_board(client, Board(tasks=specs, name="bench-cancel", max_parallel=tasks),
                               str(repo), task_queue=task_queue)

    async def all_heartbeated() -> bool:
        if len(list(pids.iterdir())) < tasks:
            return False
        pending = (await handle.describe()).raw_description.pending_activities
        return len(pending) == tasks and all(a.HasField("last_heartbeat_time") for a in pending)

    await until(all_heartbeated, interval=0.1)
    marker = f"BENCH_CANCEL={pids.name}"
    started = time.perf_counter()
    await handle.cancel()
    try:
        await handle.result()
    except WorkflowFailureError:
        pass
    closed = time.perf_counter() - started

    async def all_gone() -> bool:
        # Worktrees are pool slots: a cancelled task's slot is scrubbed and detached from its branch
        # (released), not removed, so "gone" means no slot still has a task branch checked out.
        listed = subprocess.run(["git", "-C", str(repo), "worktree", "list", "--porcelain"],
                                capture_output=True, text=True, check=True).stdout
        held = [line for line in listed.splitlines() if line.startswith("branch refs/heads/task/")]
        return not held and not processes_with_environ(marker)

    await until(all_gone)
    gone = time.perf_counter() - started
    return {"run_closed_seconds": round(closed, 3),
            "processes_and_worktrees_gone_seconds": round(gone, 3)}


def summary(runs: list[dict]) -> dict:
    gone = [r["processes_and_worktrees_gone_seconds"] for r in runs]
    return {"gone_seconds_median": round(statistics.median(gone), 3),
            "gone_seconds_max": max(gone), "runs": runs}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true",
                        help="2 tasks, one cancel, no SDK-throttle comparison")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    tasks, repeat = (2, 1) if args.quick else (args.tasks, args.repeat)
    figures: dict = {"quick": args.quick, "tasks": tasks,
                     "load_average_1m_before": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        fx = make_git_remote(root / "git")
        async with temporal_worker(TASK_QUEUE, root / "state") as client:
            runs = [await cancel_once(client, fx.clone, root / "state", root, tasks, TASK_QUEUE)
                    for _ in range(repeat)]
            figures["plugin_throttle_1s"] = summary(runs)
            if not args.quick:
                sdk_queue = TASK_QUEUE + "-sdk-throttle"
                state = root / "state-sdk"
                async with Worker(client, task_queue=sdk_queue,
                                  plugins=[TaskfleetPlugin(TaskfleetSettings(state_dir=state))],
                                  max_heartbeat_throttle_interval=timedelta(seconds=59)):
                    figures["sdk_throttle_24s"] = summary(
                        [await cancel_once(client, fx.clone, state, root, tasks, sdk_queue)])
    figures["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    emit(figures)


if __name__ == "__main__":
    run(main)
