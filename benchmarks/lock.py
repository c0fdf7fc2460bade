"""The lease lock on the dev server: acquire/release round trips per second, alone and contended,
beside a host-local flock for scale. Prints JSON; `--quick` for a short run.

- `uncontended`: one holder, acquire (update-with-start) then release (update), one after another.
- `contended`: N holders at once, each taking the lock M times; grants per second and the wait.
- `flock`: lock + unlock of a file on this host (what a single-host deployment could use instead).
- `board_pods`: wall time of one board of N tasks on 1 pod and on 5 pods (2 with `--quick`) sharing
  one clone (pods are worker processes in private mount namespaces, as in tests/pods.py; needs root
  on Linux, else reported as skipped with the reason).
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from common import emit, run, run_board, temporal_worker

from taskfleet.activities.pods.lease import LeaseLock
from taskfleet.plugin import WORKFLOWS
from taskfleet.workflows.lease_lock import LeaseLockWorkflow

TASK_QUEUE = "bench-lock"


def _ms(values: list[float]) -> dict:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms":
            round(ordered[int(len(ordered) * 0.95) - 1] * 1000, 2) if len(ordered) >= 20 else None,
        "max_ms": round(ordered[-1] * 1000, 2),
    }


async def uncontended(client, rounds: int) -> dict:
    lock = LeaseLock(client, f"bench/uncontended/{uuid.uuid4().hex[:6]}", task_queue=TASK_QUEUE,
                     lease_seconds=30)
    first = await lock.acquire("warm-up")  # starts the lock workflow
    await lock.release(first)
    acquires, releases = [], []
    started = time.perf_counter()
    for i in range(rounds):
        t0 = time.perf_counter()
        lease = await lock.acquire(f"h{i}")
        t1 = time.perf_counter()
        await lock.release(lease)
        acquires.append(t1 - t0)
        releases.append(time.perf_counter() - t1)
    wall = time.perf_counter() - started
    return {
        "rounds": rounds,
        "round_trips_per_second": round(rounds / wall, 1),
        "acquire": _ms(acquires),
        "release": _ms(releases),
    }


async def contended(client, holders: int, each: int) -> dict:
    lock = LeaseLock(client, f"bench/contended/{uuid.uuid4().hex[:6]}", task_queue=TASK_QUEUE,
                     lease_seconds=30)
    waits: list[float] = []
    inside = most = 0

    async def holder(h: int) -> None:
        nonlocal inside, most
        for i in range(each):
            t0 = time.perf_counter()
            async with lock.hold(f"h{h}-{i}"):
                waits.append(time.perf_counter() - t0)
                inside += 1
                most = max(most, inside)
                inside -= 1

    started = time.perf_counter()
    await asyncio.gather(*(holder(h) for h in range(holders)))
    wall = time.perf_counter() - started
    status = await lock.holders()
    return {
        "holders": holders,
        "grants": holders * each,
        "grants_per_second": round(holders * each / wall, 1),
        "wait": _ms(waits),
        "max_inside_at_once": most,
        "lock_workflow_runs": status.runs + 1,
    }


def flock_round_trips(rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lock"
        started = time.perf_counter()
        for _ in range(rounds):
            with open(path, "a") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                fcntl.flock(handle, fcntl.LOCK_UN)
        wall = time.perf_counter() - started
    return {"rounds": rounds, "round_trips_per_second": round(rounds / wall, 1)}


async def board_on_pods(client, address: str, tmp: Path, pods: int, tasks: int,
                        seconds: float) -> dict:
    from taskfleet.core.models.orchestrator import Board, TaskSpec
    from taskfleet.testing import make_git_remote
    from tests.pods import Pod

    root = tmp / f"pods-{pods}"
    fx = make_git_remote(root / "git")
    queue = f"bench-pods-{pods}-{uuid.uuid4().hex[:6]}"
    lessons = root / "lessons"
    lessons.mkdir(parents=True)
    fleet = [Pod(f"pod-{i}", state_dir=root / "state", address=address, task_queue=queue,
                 log=root / f"pod-{i}.log", env={"TASKFLEET_LESSONS_DIR": str(lessons)})
             for i in range(pods)]
    try:
        for pod in fleet:
            await pod.wait_started()
        write = (f'sleep {seconds}; mkdir -p out && echo "$TASKFLEET_TASK_ID" '
                 '> "out/$TASKFLEET_TASK_ID.txt"')
        board = Board(name=f"bench-{pods}-pods", max_parallel=tasks, tasks=[
            TaskSpec(id=f"t{i}", run=write, verify="true", timeout_seconds=600)
            for i in range(tasks)
        ])
        result, wall = await run_board(client, board, fx.clone, task_queue=queue,
                                       git_max_batch_age_seconds=1)
    finally:
        for pod in fleet:
            pod.stop()
    return {
        "pods": pods,
        "tasks": tasks,
        "task_seconds": seconds,
        "wall_seconds": round(wall, 2),
        "succeeded": sum(1 for t in result.tasks if t.status == "succeeded"),
        "landed": sum(1 for t in result.tasks if t.landed),
        "pushes": result.stats.pushes,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (CI, smoke)")
    args = parser.parse_args()
    rounds, holders, each = (30, 3, 5) if args.quick else (300, 5, 40)
    extra = {} if LeaseLockWorkflow in WORKFLOWS else {"workflows": [LeaseLockWorkflow]}
    with tempfile.TemporaryDirectory() as tmp:
        async with temporal_worker(TASK_QUEUE, Path(tmp) / "state", **extra) as client:
            figures = {
                "benchmark": "lock",
                "quick": args.quick,
                "cpus": os.cpu_count(),
                "uncontended": await uncontended(client, rounds),
                "contended": await contended(client, holders, each),
                "flock": flock_round_trips(rounds * 100),
            }
            from tests.pods import namespaces_unavailable

            why = namespaces_unavailable()
            if why:
                figures["board_pods"] = {"skipped": why}
            else:
                address = client.service_client.config.target_host
                tasks, seconds, fleets = (10, 0.2, (1, 2)) if args.quick else (100, 0.5, (1, 5))
                figures["board_pods"] = [
                    await board_on_pods(client, address, Path(tmp), pods, tasks, seconds)
                    for pods in fleets
                ]
    emit(figures)


if __name__ == "__main__":
    run(main)
