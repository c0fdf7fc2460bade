"""Worktree set-up per task on a generated repository (issue 16 item 5), cold pool then warm pool.

    .venv/bin/python notes/h2_worktree_bench.py --files 20000 --tasks 20
Prints one JSON object per run. A measuring aid for the lead (benchmarks/ belongs to h5).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
import uuid
from pathlib import Path

from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from taskfleet.clients.orchestrator import start_board
from taskfleet.core.models.orchestrator import Board, TaskSpec
from taskfleet.core.search_attributes import ALL as SEARCH_ATTRIBUTES
from taskfleet.core.settings import TaskfleetSettings
from taskfleet.devserver.server import find_temporal_cli
from taskfleet.plugin import TaskfleetPlugin
from taskfleet.testing import make_git_remote


def grow(clone: Path, files: int) -> None:
    for i in range(files):
        folder = clone / "src" / f"d{i // 500}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i}.txt").write_text(f"file {i}\nx\n")
    subprocess.run(["git", "add", "-A"], cwd=clone, check=True)
    subprocess.run(["git", "commit", "-qm", f"{files} files"], cwd=clone, check=True)
    subprocess.run(["git", "push", "-q", "origin", "main"], cwd=clone, check=True)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="h2-bench-"))
    fx = make_git_remote(root / "git")
    grow(fx.clone, args.files)
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=find_temporal_cli(), search_attributes=SEARCH_ATTRIBUTES, dev_server_log_level="error"
    )
    queue = f"bench-{uuid.uuid4().hex[:6]}"
    try:
        worker = Worker(env.client, task_queue=queue, max_concurrent_activities=100,
                        plugins=[TaskfleetPlugin(TaskfleetSettings(state_dir=root / "state"))])
        async with worker:
            for run in range(args.runs):
                tasks = [TaskSpec(id=f"T{i}", run=f"sed -i s/x/y/ src/d0/f{i}.txt", verify="true",
                                  refresh=True, timeout_seconds=600) for i in range(args.tasks)]
                board = Board(tasks=tasks, name="bench", max_parallel=args.tasks)
                handle = await start_board(env.client, board, str(fx.clone), task_queue=queue,
                                           git_max_batch_age_seconds=1, heartbeat_timeout_seconds=30)
                result = await handle.result()
                s = result.stats
                print(json.dumps({
                    "run": run + 1, "files": args.files, "tasks": args.tasks,
                    "succeeded": sum(t.status == "succeeded" for t in result.tasks),
                    "landed": sum(t.landed for t in result.tasks),
                    "wall_seconds": s.wall_seconds, "setup_seconds_per_task": round(s.setup_seconds / args.tasks, 4),
                    "work_seconds": round(s.work_seconds, 3), "speedup": s.speedup,
                    "overhead_seconds_per_task": s.overhead_seconds_per_task,
                    "wait_seconds": round(s.wait_seconds, 3), "landing_seconds": round(s.landing_seconds, 3),
                }), flush=True)
    finally:
        await env.shutdown()
    out = subprocess.run(["git", "worktree", "list"], cwd=fx.clone, capture_output=True, text=True).stdout
    print(json.dumps({"worktrees_registered_after_stop": len(out.splitlines()) - 1}))


if __name__ == "__main__":
    asyncio.run(main())
