"""Orchestrator dispatch: N tasks of d seconds at concurrency c, through the real server and worker.

Reports wall, ideal = ceil(N / c) * d, efficiency = ideal / wall and overhead per task in ms. The
floors' cases use tasks with `worktree = false` (the task is its command: no git), so they measure
dispatch itself; a `with_worktrees` case shows what worktree set-up, commit and landing add. The
2,000-task board runs under a forced small history limit and reports its largest run's history.
Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import tempfile
import time
from pathlib import Path

from common import emit, temporal_worker

from taskfleet.clients.orchestrator import start_board
from taskfleet.core.models.orchestrator import Board, TaskSpec
from taskfleet.testing import make_git_remote

TASK_QUEUE = "bench-dispatch"


async def run_case(client, repo: Path, n: int, seconds: float, concurrency: int, worktree: bool = False,
                   max_history_events: int = 0) -> dict:
    command = f"sleep {seconds}" if seconds else "true"
    if worktree:
        command += ' && echo "$TASKFLEET_TASK_ID" > done.txt'
    tasks = [TaskSpec(id=f"t{i}", run=command, verify="true", worktree=worktree, timeout_seconds=600)
             for i in range(n)]
    started = time.perf_counter()
    handle = await start_board(client, Board(tasks=tasks, name=f"bench-{n}", max_parallel=concurrency),
                               str(repo), task_queue=TASK_QUEUE, max_history_events=max_history_events,
                               git_max_batch_age_seconds=60)
    result = await handle.result()
    wall = time.perf_counter() - started
    ideal = math.ceil(n / concurrency) * seconds
    failed = [t.id for t in result.tasks if t.status != "succeeded"]
    return {
        "tasks": n,
        "task_seconds": seconds,
        "concurrency": concurrency,
        "worktrees": worktree,
        "wall_seconds": round(wall, 3),
        "workflow_wall_seconds": result.stats.wall_seconds,
        "ideal_seconds": round(ideal, 3),
        "efficiency": round(ideal / wall, 3) if ideal else None,
        "efficiency_workflow_clock": round(ideal / result.stats.wall_seconds, 3) if ideal else None,
        "overhead_ms_per_task": round((wall - ideal) * 1000 / n, 2),
        "speedup": result.stats.speedup,
        "avg_task_activity_seconds": round(sum(t.seconds for t in result.tasks) / n, 4),
        "max_running_observed": result.stats.max_running,
        "failed": len(failed),
        "history_runs": result.stats.runs,
        "largest_history_length": result.stats.largest_history_length,
        "pushes": result.stats.pushes,
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="skip the 2,000-task board")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fx = make_git_remote(Path(tmp) / "git")
        async with temporal_worker(TASK_QUEUE, Path(tmp) / "state", max_concurrent_activities=200, max_concurrent_activity_task_polls=int(os.environ.get("POLLS", "5"))) as client:
            await run_case(client, fx.clone, 20, 0, 20)  # warm-up: server caches, imports
            cases = {
                "9x0.5s_c9": await run_case(client, fx.clone, 9, 0.5, 9),
                "100x0.2s_c20": await run_case(client, fx.clone, 100, 0.2, 20),
                "1000_noop_c100": await run_case(client, fx.clone, 1000, 0, 100),
                "9x0.5s_c9_with_worktrees": await run_case(client, fx.clone, 9, 0.5, 9, worktree=True),
            }
            if not args.quick:
                cases["2000_noop_c100_history_limit_2000"] = await run_case(
                    client, fx.clone, 2000, 0, 100, max_history_events=2000
                )
    emit(cases)


if __name__ == "__main__":
    asyncio.run(main())
