"""Fleet scale: boards of 1k, 10k and 100k no-op tasks through `taskfleet run`, end to end.

Each board is a TOML file of no-op tasks (`worktree = false`, `run = "true"`, `verify = "true"`):
what is measured is taskfleet itself. The worker and the CLI run as their own processes against a
local dev server, so their peak RSS is theirs alone. Per size: wall time of `taskfleet run --json`,
ms per task, runs (continue-as-new), largest history (events, bytes) and largest payload over
every run, the worker's and the CLI's peak RSS, and how many outcomes `run --json` and
`status --json` listed. Floors: every size finishes; ms per task at the largest size
within 1.5x of the smallest; no payload over 256 KB. Prints JSON.

    python benchmarks/scale.py            # 1k, 10k, 100k (about 20 minutes here)
    python benchmarks/scale.py --quick    # 50, 250 (seconds; `make test` runs it)
    python benchmarks/scale.py --sizes 2000 20000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, emit, run
from temporalio.testing import WorkflowEnvironment

from taskfleet.core.search_attributes import ALL
from taskfleet.devserver.server import find_temporal_cli
from taskfleet.testing import make_git_remote
from tests.scale_support import PAYLOADS_LIMIT_BYTES, history_figures, write_noop_board

TASK_QUEUE = "bench-scale"


def peak_rss_mb(pid: int) -> float:
    """A live process's peak resident set (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def run_cli(args: list[str], out: Path) -> tuple[int, float, float]:
    """`taskfleet <args>` with stdout to `out`: exit code, wall seconds, peak RSS (MB)."""
    started = time.perf_counter()
    with open(out, "wb") as stdout:
        proc = subprocess.Popen([sys.executable, "-m", "taskfleet.cli", *args],
                                stdout=stdout, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.perf_counter() - started, round(usage.ru_maxrss / 1024, 1)


def count_json_tasks(path: Path) -> tuple[int, int]:
    """(tasks listed, tasks not succeeded) in a `run --json` / `status --json` output."""
    data = json.loads(path.read_text())
    tasks = data.get("tasks", [])
    return len(tasks), sum(1 for t in tasks if t.get("status") != "succeeded")


async def run_size(client, address: str, clone: Path, work: Path, n: int, max_parallel: int,
                   worker_pid: int) -> dict:
    board = write_noop_board(work / f"noop-{n}.toml", n, max_parallel=max_parallel,
                             name=f"noop-{n}")
    workflow_id = f"scale-{n}-{int(time.time())}"
    common = ["--address", address, "--task-queue", TASK_QUEUE]
    out = work / f"run-{n}.json"
    code, wall, cli_rss = run_cli(
        [*common, "run", str(board), "--repo", str(clone), "--id", workflow_id, "--json"], out)
    figures = {"tasks": n, "exit_code": code, "wall_seconds": round(wall, 2),
               "ms_per_task": round(wall * 1000 / n, 3)}
    if code not in (0, 1):
        figures["error"] = out.read_text()[-2000:]
        return figures
    listed, not_succeeded = count_json_tasks(out)
    status_out = work / f"status-{n}.json"
    status_code, status_wall, status_rss = run_cli([*common, "status", workflow_id, "--json"],
                                                   status_out)
    status_listed = count_json_tasks(status_out)[0] if status_code == 0 else -1
    history = (await history_figures(client, workflow_id)).as_dict()
    figures.update(
        run_json_tasks=listed,
        not_succeeded=not_succeeded,
        status_json_tasks=status_listed,
        status_seconds=round(status_wall, 2),
        history_runs=history["runs"],
        largest_history_events=history["largest_history_events"],
        largest_history_bytes=history["largest_history_bytes"],
        largest_payload_bytes=history["largest_payload_bytes"],
        largest_payload_event=history["largest_payload_event"],
        worker_peak_rss_mb=peak_rss_mb(worker_pid),
        cli_run_peak_rss_mb=cli_rss,
        cli_status_peak_rss_mb=status_rss,
        board_file_mb=round(board.stat().st_size / 1e6, 2),
    )
    return figures


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes only (50, 250)")
    parser.add_argument("--sizes", type=int, nargs="*",
                        help="board sizes to run (default 1000 10000 100000)")
    parser.add_argument("--max-parallel", type=int, default=200)
    args = parser.parse_args()
    sizes = args.sizes or ([50, 250] if args.quick else [1000, 10_000, 100_000])
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        fx = make_git_remote(work / "git")
        env = await WorkflowEnvironment.start_local(dev_server_existing_path=find_temporal_cli(),
                                                    search_attributes=ALL,
                                                    dev_server_log_level="error")
        address = env.client.service_client.config.target_host
        log = open(work / "worker.log", "wb")
        worker = subprocess.Popen(
            [sys.executable, "-m", "taskfleet.worker", "--address", address, "--task-queue",
             TASK_QUEUE, "--state-dir", str(work / "state"), "--max-concurrent-activities", "200"],
            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            deadline = time.monotonic() + 60
            while b"task_queue=" not in (work / "worker.log").read_bytes():
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"worker did not start:\n{(work / 'worker.log').read_text()}")
                await asyncio.sleep(0.1)
            cases = {}
            for n in sizes:
                cases[f"{n}_noop"] = await run_size(env.client, address, fx.clone, work, n,
                                                    args.max_parallel, worker.pid)
                print(json.dumps(cases[f"{n}_noop"]), file=sys.stderr, flush=True)
        finally:
            worker.terminate()
            worker.wait(timeout=60)
            log.close()
            await env.shutdown()
    first, last = cases[f"{sizes[0]}_noop"], cases[f"{sizes[-1]}_noop"]
    floors = {
        "all_finished": all(c.get("exit_code") in (0, 1) and c.get("run_json_tasks") == c["tasks"]
                            for c in cases.values()),
        "ms_per_task_ratio_largest_to_smallest":
            round(last["ms_per_task"] / first["ms_per_task"], 2),
        "ms_per_task_within_1_5x": last["ms_per_task"] <= 1.5 * first["ms_per_task"],
        "no_payload_over_256kb": all(c.get("largest_payload_bytes", 0) <= PAYLOADS_LIMIT_BYTES
                                     for c in cases.values()),
    }
    emit({"quick": args.quick, "cases": cases, "floors": floors, "max_parallel": args.max_parallel})


if __name__ == "__main__":
    run(main)
