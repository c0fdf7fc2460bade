"""Running a board's command (executor or verification) in a task's worktree.

The command line is the board author's, run with `sh -c`; task fields never enter it, they reach
it as environment variables. It runs in its own process group, so a timeout or a cancelled
activity kills everything it started. Output goes to the task's log file, not to memory.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TAIL_BYTES = 4096


@dataclass
class CommandResult:
    exit_code: int | None  # None: killed by the timeout
    seconds: float
    timed_out: bool


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


async def _exited(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait up to `timeout` for the process to exit, without reaping it.

    A pidfd in the event loop's selector wakes us when it exits: no watcher thread and no
    `call_soon_threadsafe` hand-off per process (asyncio's child watchers lost wake-ups under the
    Temporal worker here, leaving activities hanging). Elsewhere, poll.
    """
    if proc.poll() is not None:
        return True
    if not hasattr(os, "pidfd_open"):
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True
    loop = asyncio.get_running_loop()
    fd = os.pidfd_open(proc.pid)
    done = loop.create_future()
    loop.add_reader(fd, lambda: done.done() or done.set_result(None))
    try:
        await asyncio.wait_for(done, timeout)
        return True
    except asyncio.TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def _stop(proc: subprocess.Popen, grace: float = 2.0) -> None:
    """SIGTERM to the whole group, SIGKILL after `grace` seconds; reaps the process."""
    if proc.poll() is None:
        _kill_group(proc.pid, signal.SIGTERM)
        if not await _exited(proc, grace):
            _kill_group(proc.pid, signal.SIGKILL)
    # The leader is not reaped yet, so its pid (= the group id) cannot have been reused:
    # this reaches only stragglers of this command's own group.
    _kill_group(proc.pid, signal.SIGKILL)
    proc.wait()


async def run_command(
    command: str,
    cwd: Path,
    env: dict[str, str],
    log_path: Path,
    timeout: float,
    heartbeat: Callable[[], None],
    label: str,
    heartbeat_every: float = 1.0,
) -> CommandResult:
    started = time.monotonic()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"\n$ ({label}) {command}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            ["sh", "-c", command], cwd=str(cwd), env=env, stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            deadline = started + timeout
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    await _stop(proc)
                    log.write(f"\n[taskfleet] {label} timed out after {timeout:g}s\n".encode())
                    return CommandResult(None, time.monotonic() - started, True)
                if await _exited(proc, min(heartbeat_every, remaining)):
                    code = proc.wait()
                    return CommandResult(code, time.monotonic() - started, False)
                heartbeat()
        except BaseException:
            # Cancelled (or anything else): nothing we started may outlive the activity.
            await asyncio.shield(_stop(proc))
            raise


def tail(path: Path, limit: int = TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""
