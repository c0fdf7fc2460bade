"""Worktree set-up per task on a generated repository: cold pool, then warm pool.

N one-line `sed` tasks at max_parallel N on a repository of F small files (default 20,000 files,
20 tasks). The first board meets an empty pool (every slot is registered and checked out once);
the next boards reuse the slots, each a clean checkout of the base, so a task's set-up only moves
its branch. Prints the mean set-up per task (the run's `stats.setup_seconds` / N) per
board, the run's `stats`, and the worktrees left registered after the worker stops (0).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
from pathlib import Path

from common import emit, run, run_board, temporal_worker

from taskfleet.core.models.orchestrator import Board, TaskSpec
from taskfleet.testing import make_git_remote

TASK_QUEUE = "bench-worktrees"


def grow(clone: Path, files: int) -> None:
    for i in range(files):
        folder = clone / "src" / f"d{i // 500}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i}.txt").write_text(f"file {i}\nx\n")
    subprocess.run(["git", "add", "-A"], cwd=clone, check=True)
    subprocess.run(["git", "commit", "-qm", f"{files} files"], cwd=clone, check=True)
    subprocess.run(["git", "push", "-q", "origin", "main"], cwd=clone, check=True)


async def board_once(client, clone: Path, tasks: int, label: str) -> dict:
    specs = [TaskSpec(id=f"{label}-{i}", run=f"sed -i s/x/{label}/ src/d0/f{i}.txt", verify="true",
                      refresh=True, timeout_seconds=600) for i in range(tasks)]
    result, wall = await run_board(
        client, Board(tasks=specs, name=f"bench-{label}", max_parallel=tasks), clone,
        task_queue=TASK_QUEUE, git_max_batch_age_seconds=1, heartbeat_timeout_seconds=60)
    s = result.stats
    return {
        "board": label,
        "succeeded": sum(t.status == "succeeded" for t in result.tasks),
        "landed": sum(t.landed for t in result.tasks),
        "wall_seconds": round(wall, 3),
        "setup_ms_per_task_mean": round(s.setup_seconds * 1000 / tasks, 1),
        "speedup": s.speedup,
        "overhead_seconds_per_task": s.overhead_seconds_per_task,
        # Its parts, per task: scheduled -> started, the activity beyond the task's own commands
        # (set-up, snapshot, commit, landing op), and task done -> landed.
        "wait_ms_per_task": round(s.wait_seconds * 1000 / tasks, 1),
        "activity_overhead_ms_per_task":
            round(max(s.task_seconds - s.work_seconds, 0.0) * 1000 / tasks, 1),
        "landing_ms_per_task": round(s.landing_seconds * 1000 / tasks, 1),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--warm-boards", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2,000 files, 4 tasks, one warm board")
    args = parser.parse_args()
    if args.quick:
        args.files, args.tasks, args.warm_boards = 2000, 4, 1
    root = Path(tempfile.mkdtemp(prefix="bench-worktrees-"))
    fx = make_git_remote(root / "git")
    grow(fx.clone, args.files)
    boards = []
    async with temporal_worker(TASK_QUEUE, root / "state", max_concurrent_activities=100) as client:
        boards.append(await board_once(client, fx.clone, args.tasks, "cold"))
        for i in range(args.warm_boards):
            boards.append(await board_once(client, fx.clone, args.tasks, f"warm{i + 1}"))
    listed = subprocess.run(["git", "worktree", "list"], cwd=fx.clone, capture_output=True,
                            text=True).stdout
    warm = [b["setup_ms_per_task_mean"] for b in boards[1:]]
    emit({
        "benchmark": "worktrees",
        "quick": args.quick,
        "files": args.files,
        "tasks": args.tasks,
        "concurrency": args.tasks,
        "boards": boards,
        "warm_setup_ms_per_task_median_of_boards":
            round(statistics.median(warm), 1) if warm else None,
        "warm_setup_ms_per_task_worst_board": max(warm) if warm else None,
        "worktrees_registered_after_stop": len(listed.splitlines()) - 1,
    })


if __name__ == "__main__":
    run(main)
