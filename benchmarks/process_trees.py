"""What each way of making a task's processes die with it costs, and how fast they die.

For each mechanism (`pid-namespace`: a PID namespace per command; `process-group`: process groups
and a watchdog; see activities/processes/process_trees.py), through the executor (`run_command`):

- the wall time of one command from start to exit (`true` started directly, and `sh -c`), one at a
  time, median and p90; and 20 commands at once;
- after SIGKILL of a worker whose task runs `sh -c 'sleep 30 & sleep 30 & wait'`: the time until
  no process of that task is left (the kernel's doing with a namespace, the watchdog's without).

Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from common import ROOT, emit, run

from taskfleet.activities.processes.executor import run_command
from taskfleet.activities.processes.executor_policy import ExecutorPolicy, using_policy
from taskfleet.activities.processes.process_trees import (
    MODE_GROUP,
    MODE_NAMESPACE,
    ProcessTreesUnavailable,
    detect,
)
from taskfleet.core.task_env import TaskEnvironment

FAKE_WORKER = """
import asyncio, sys
sys.path.insert(0, {root!r})
from pathlib import Path
from taskfleet.activities.processes.executor import run_command
from taskfleet.activities.processes.executor_policy import ExecutorPolicy, using_policy
from taskfleet.activities.processes.executor_records import TOKEN_VARIABLE
from taskfleet.activities.processes.process_trees import Watchdog, detect
from taskfleet.core.task_env import TaskEnvironment

async def main():
    trees = detect({mode!r})
    if not trees.namespaced:
        Watchdog.ensure(TOKEN_VARIABLE)
    with using_policy(ExecutorPolicy(TaskEnvironment(), trees)), open({log!r}, "a+b") as log:
        print("ready", flush=True)
        await run_command("export " + {marker!r} + "; sh -c 'sleep 30 & sleep 30 & wait'", Path({cwd!r}),
                          {{TOKEN_VARIABLE: "%d-bench" % __import__("os").getpid()}}, log, 120, lambda: None, "run")

asyncio.run(main())
"""  # noqa: E501 (a script's text: its lines are the code it runs)


def carriers(entry: str) -> list[int]:
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


async def command_seconds(policy: ExecutorPolicy, command: str, cwd: Path, n: int) -> list[float]:
    out = []
    with using_policy(policy), open(cwd / "log", "a+b") as log:
        for _ in range(n):
            started = time.perf_counter()
            ran = await run_command(command, cwd, {}, log, 30, lambda: None, "bench")
            out.append(time.perf_counter() - started)
            assert ran.exit_code == 0
    return out


async def at_once(policy: ExecutorPolicy, cwd: Path, n: int) -> float:
    with using_policy(policy), open(cwd / "log", "a+b") as log:
        started = time.perf_counter()
        await asyncio.gather(*(run_command("sh -c 'true; true'", cwd, {}, log, 30, lambda: None,
                                           "bench") for _ in range(n)))
        return time.perf_counter() - started


def gone_after_kill(mode: str, cwd: Path) -> float:
    marker = f"BENCH_TREE={uuid.uuid4().hex}"
    script = FAKE_WORKER.format(root=str(ROOT), mode=mode, log=str(cwd / "fake.log"),
                                marker=marker, cwd=str(cwd))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 30
    # `sh -c` and its two sleeps (exported after the task shell started)
    while len(carriers(marker)) < 3:
        if time.monotonic() > deadline:
            raise TimeoutError("the task did not start")
        time.sleep(0.01)
    started = time.perf_counter()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    while carriers(marker):
        if time.perf_counter() - started > 30:
            for pid in carriers(marker):
                os.kill(pid, signal.SIGKILL)
            return float("inf")
        time.sleep(0.002)
    return time.perf_counter() - started


def summary(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"median_ms": round(statistics.median(ordered) * 1000, 2),
            "p90_ms": round(
                ordered[int(len(ordered) * 0.9) - 1 if len(ordered) > 1 else 0] * 1000, 2)}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true",
                        help="20 commands per case, one kill per mode")
    parser.add_argument("--commands", type=int, default=300)
    parser.add_argument("--kills", type=int, default=5)
    args = parser.parse_args()
    n, kills = (20, 1) if args.quick else (args.commands, args.kills)
    figures: dict = {"quick": args.quick, "commands_per_case": n,
                     "load_average_1m_before": round(os.getloadavg()[0], 2)}
    modes = [MODE_GROUP]
    try:
        detect(MODE_NAMESPACE)
        modes.insert(0, MODE_NAMESPACE)
    except ProcessTreesUnavailable as err:
        figures["pid_namespace_unavailable"] = str(err)
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        for mode in modes:
            policy = ExecutorPolicy(TaskEnvironment(), detect(mode))
            direct, shell = [], []
            for _ in range(2):  # alternating halves, so a spell of load falls on both
                direct += await command_seconds(policy, "true", cwd, n // 2)
                shell += await command_seconds(policy, "sh -c 'true; true'", cwd, n // 2)
            figures[mode] = {
                "direct_command": summary(direct),
                "shell_command": summary(shell),
                "twenty_at_once_seconds": round(await at_once(policy, cwd, 20), 3),
                "gone_after_worker_sigkill_ms": [round(gone_after_kill(mode, cwd) * 1000, 1)
                                                 for _ in range(kills)],
            }
    figures["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    emit(figures)


if __name__ == "__main__":
    run(main)
