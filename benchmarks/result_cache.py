"""Activity result cache: the cost of a hit (key + lookup, from memory and from SQLite after a
restart) against the executor's full run, measured side by side. Prints JSON."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from common import emit, run

from taskfleet.activities.processes.executor import run_command
from taskfleet.activities.services.result_cache import ResultCache, cache_key


def key_for(i: int) -> str:
    return cache_key(activity_type="implement", run="python3 tools/make_op.py add",
                     prompt="p" * 4000 + str(i), base_tree="9f" * 20, verify="python3 -m unittest")


def timed_ms(fn, repeat: int) -> list[float]:
    out = []
    for i in range(repeat):
        started = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - started) * 1000)
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--executor", default="sleep 0.5 && echo done",
                        help="the executor a hit replaces")
    parser.add_argument("--quick", action="store_true",
                        help="500 entries, a 0.1 s executor: seconds")
    args = parser.parse_args()
    if args.quick:
        args.entries, args.executor = 500, "sleep 0.1 && echo done"
    value = {"commit": "ab" * 20, "exec_exit_code": 0, "verify_exit_code": 0,
             "output_tail": "x" * 4096}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cache.sqlite"
        cache = ResultCache(path)
        cache.open()
        for i in range(args.entries):
            cache.put(key_for(i), value)
        memory = timed_ms(lambda i: cache.get(key_for(i % args.entries)), 2_000)
        cache.close()
        restarted = ResultCache(path)  # a new worker: empty memory, warm disk
        restarted.open()
        disk = timed_ms(lambda i: restarted.get(key_for(i)), 2_000)
        restarted.close()
        started = time.perf_counter()
        # run_command appends to a log the caller opened
        with open(Path(tmp) / "log", "a+b") as log:
            ran = await run_command(args.executor, Path(tmp), dict(os.environ), log, 60,
                                    lambda: None, "run")
        if ran.exit_code != 0:
            raise SystemExit(f"the executor {args.executor!r} exited with {ran.exit_code}")
        executor_ms = (time.perf_counter() - started) * 1000

    def p99(samples: list[float]) -> float:
        return round(sorted(samples)[int(len(samples) * 0.99) - 1], 4)

    emit({
        "quick": args.quick,
        "entries": args.entries,
        "hit_from_memory_ms": {"p50": round(statistics.median(memory), 4), "p99": p99(memory)},
        "hit_from_sqlite_after_restart_ms": {"p50": round(statistics.median(disk), 4),
                                             "p99": p99(disk)},
        "executor_full_run_ms": round(executor_ms, 1),
        "executor": args.executor,
        "hit_vs_run_ratio": round(executor_ms / statistics.median(disk), 1),
    })


if __name__ == "__main__":
    run(main)
