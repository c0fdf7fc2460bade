"""The merge queue against a one-at-a-time queue (merge one, verify, push, next), measured in the same run.

50 entries (each adds a module that calls `lib.helper()`), a verify command that takes about 1 s
(imports every module and calls it), and k culprits in {0, 1, 3}: a culprit deletes `lib.helper`, so
it passes alone (nothing calls it on the base) and fails merged with any other entry. Culprits are
spread through the queue, never first. Both queues are the same `MergeQueueWorkflow`; one-at-a-time is
`max_batch` 1. Prints verify runs, pushes, bisection steps and wall for each, the ratios, the floors
of the issue and whether they hold; every run also checks that all non-culprits landed, no culprit
did, and the target's final tip passes verify. JSON on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import subprocess
import tempfile
import time
from pathlib import Path

from common import emit, run, temporal_worker

from taskfleet.clients.merge_queue import MergeQueueClient
from taskfleet.core.models.merge_queue import MergeQueueConfig, QueueEntry
from taskfleet.testing import git, make_git_remote

TASK_QUEUE = "bench-queue"
CHECK = """import importlib, pathlib, sys, time
time.sleep({sleep})
sys.path.insert(0, ".")
for path in sorted(pathlib.Path("calls").glob("m*.py")):
    importlib.import_module("calls." + path.stem).run()
"""
LIB = "def helper():\n    return 1\n"
CULPRIT_LIB = "def renamed_helper():\n    return 1\n"


def culprit_positions(n: int, k: int) -> list[int]:
    """k positions spread through n entries, never the first (a culprit first, on a base nobody
    calls `helper` on, would pass: nothing it clashes with has landed yet)."""
    return [(i + 1) * n // (k + 1) for i in range(k)]


def prepare(root: Path, n: int, k: int, sleep: float) -> tuple[object, list[QueueEntry], set[str]]:
    seed = root / "seed-files"
    (seed / "calls").mkdir(parents=True)
    (seed / "lib.py").write_text(LIB)
    (seed / "check.py").write_text(CHECK.format(sleep=sleep))
    (seed / "calls" / "__init__.py").write_text("")
    fx = make_git_remote(root / "git", seed_from=seed)
    culprits = set(culprit_positions(n, k))
    entries = []
    for i in range(n):
        branch = f"{'culprit' if i in culprits else 'entry'}/{i:02d}"
        files = {"lib.py": CULPRIT_LIB} if i in culprits else {
            f"calls/m{i:02d}.py": "import lib\n\n\ndef run():\n    assert lib.helper() == 1\n"}
        entries.append(QueueEntry(branch=branch, expect_commit=fx.branch_with(branch, files), id=branch))
    return fx, entries, {e.id for e in entries if e.id.startswith("culprit/")}


def tip_passes(fx, root: Path) -> bool:
    checkout = root / "final"
    git(root, "clone", "-q", str(fx.remote), str(checkout))
    return subprocess.run(["python3", "check.py"], cwd=checkout, capture_output=True).returncode == 0


async def one_queue(client, root: Path, n: int, k: int, max_batch: int, sleep: float) -> dict:
    fx, entries, culprits = prepare(root, n, k, sleep)
    q = MergeQueueClient(client, MergeQueueConfig(repo=str(fx.clone), target="main", verify="python3 check.py",
                                                  max_batch=max_batch, max_wait_seconds=3600), TASK_QUEUE)
    started = time.perf_counter()
    for entry in entries:
        await q.enqueue(entry)
    await q.flush()
    while True:
        stats = await q.stats()
        if stats.landed + stats.rejected + stats.conflicts >= n:
            break
        await asyncio.sleep(0.05)  # polling the queue's counters while it works: what a caller waits
    wall = time.perf_counter() - started
    status = await q.status()
    tip = fx.remote_ref("main")
    landed = {e.id for e in entries if subprocess.run(
        ["git", "merge-base", "--is-ancestor", e.expect_commit, tip], cwd=fx.remote, capture_output=True).returncode == 0}
    return {
        "max_batch": max_batch,
        "wall_seconds": round(wall, 2),
        "verify_runs": stats.verify_runs,
        "pushes": stats.pushes,
        "pushes_counted_by_hook": fx.pushes(),
        "bisection_steps": stats.bisection_steps,
        "rebuilds": stats.rebuilds,
        "landed": stats.landed,
        "rejected": stats.rejected,
        "conflicts": stats.conflicts,
        "final_window": stats.window,
        "verify_seconds": round(stats.verify_seconds, 2),
        "all_non_culprits_landed": landed == {e.id for e in entries} - culprits,
        "no_culprit_landed": not (landed & culprits),
        "rejected_are_the_culprits": {o.entry_id for o in status.recent if o.status == "rejected"} == culprits
        if len(status.recent) >= n else None,
        "final_tip_passes_verify": tip_passes(fx, root),
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=50)
    parser.add_argument("--max-batch", type=int, default=8, help="B: the queue's max_batch (its first window)")
    parser.add_argument("--verify-seconds", type=float, default=0.95, help="sleep in the verify command (~1 s in all)")
    parser.add_argument("--culprits", type=int, action="append", help="k (repeatable; default 0, 1 and 3)")
    parser.add_argument("--quick", action="store_true",
                        help="8 entries, B 4, a 0.1 s verify, k 1 (a green batch and a bisected one): seconds")
    args = parser.parse_args()
    if args.quick:
        args.entries, args.max_batch, args.verify_seconds = 8, 4, 0.1
        args.culprits = args.culprits or [1]
    n, b = args.entries, args.max_batch
    figures: dict = {"quick": args.quick, "entries": n, "max_batch": b, "verify_sleep_seconds": args.verify_seconds}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async with temporal_worker(TASK_QUEUE, root / "state") as client:
            # Unmeasured: the first queue pays one-time costs (imports, the server's caches, a new slot).
            await one_queue(client, root / "warm-up", 4, 0, 4, 0.0)
            for k in args.culprits or [0, 1, 3]:
                batched = await one_queue(client, root / f"k{k}-batched", n, k, b, args.verify_seconds)
                single = await one_queue(client, root / f"k{k}-single", n, k, 1, args.verify_seconds)
                case = {"batched": batched, "one_at_a_time": single,
                        "wall_ratio_batched_over_one_at_a_time": round(batched["wall_seconds"] / single["wall_seconds"], 3)}
                correct = all(r["all_non_culprits_landed"] and r["no_culprit_landed"] and r["final_tip_passes_verify"]
                              for r in (batched, single))
                if k == 0:
                    case["floor_verify_runs"] = math.ceil(n / b) + 1
                    case["floor_wall_ratio"] = 0.25
                elif k == 1:
                    case["floor_verify_runs"] = math.ceil(n / b) + 2 * math.ceil(math.log2(b)) + 2
                    case["floor_wall_ratio"] = round(1 / 3, 3)
                if "floor_verify_runs" in case:
                    case["floors_met"] = (correct and batched["verify_runs"] <= case["floor_verify_runs"]
                                          and case["wall_ratio_batched_over_one_at_a_time"] <= case["floor_wall_ratio"])
                case["correct"] = correct
                figures[f"k={k}"] = case
    emit(figures)


if __name__ == "__main__":
    run(main)
