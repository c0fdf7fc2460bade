"""`git` (and file locks) from the worker's event loop: no thread waits, everything heartbeats.
A git command is a child process watched through a pidfd, its output in memory files, so a
hundred tasks waiting on git or a lock use no thread (thread pools are small: one blocked in
`flock` for a task's lifetime starves the worker)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from taskfleet.activities.pods.shared_clone import is_lock_contention, retry_delays
from taskfleet.activities.processes.executor import _exited

Heartbeat = Callable[[], None]
LOCK_RETRY_SECONDS = 60.0

# No automatic gc or maintenance from our git calls (they run in parallel on one clone), and never
# a password prompt on the worker's terminal.
GIT_ENV = {
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "maintenance.auto",
    "GIT_CONFIG_VALUE_0": "false",
    "GIT_CONFIG_KEY_1": "gc.auto",
    "GIT_CONFIG_VALUE_1": "0",
    "GIT_TERMINAL_PROMPT": "0",
}


_NAMES_A_LOCK = re.compile(r"'([^']*\.lock)'")  # git quotes the lock file it could not create


def _nothing() -> None:
    pass


class GitError(Exception):
    """A git command failed; the message is git's last line of error output."""

    def __init__(self, args: tuple[str, ...], code: int, err: str) -> None:
        lines = [line for line in err.strip().splitlines() if line.strip()]
        self.code, self.stderr = code, err
        # git's last line is often advice ("remove the file manually to continue."); the line
        # that names a lock file says which file.
        named = [line for line in lines if _NAMES_A_LOCK.search(line)]
        detail = named[0] if named else (lines[-1] if lines else f"exit {code}")
        self.lock_file = _NAMES_A_LOCK.search(named[0]).group(1) if named else ""
        super().__init__(f"git {' '.join(args[:2])} failed: {detail.strip()}")


@dataclass
class GitRun:
    code: int
    out: str
    err: str


def _memfile(name: str) -> int:
    if hasattr(os, "memfd_create"):
        return os.memfd_create(name)
    import tempfile

    fd, path = tempfile.mkstemp(prefix=name)
    os.unlink(path)
    return fd


def _read_all(fd: int) -> str:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0).decode(errors="replace") if size else ""


async def git_run(
    cwd: str | Path, *args: str, env: dict[str, str] | None = None, heartbeat: Heartbeat = _nothing
) -> GitRun:
    """`git args...` in `cwd`, whatever its exit code; failing only on another process's lock file
    (contention on a shared clone), it is retried with backoff for up to a minute."""
    delays = retry_delays(LOCK_RETRY_SECONDS)
    while True:
        ran = await _git_once(cwd, *args, env=env, heartbeat=heartbeat)
        if ran.code == 0 or not is_lock_contention(ran.err):
            return ran
        wait = next(delays, None)
        if wait is None:
            return ran
        heartbeat()
        await asyncio.sleep(wait)


async def _git_once(
    cwd: str | Path, *args: str, env: dict[str, str] | None = None, heartbeat: Heartbeat = _nothing
) -> GitRun:
    out, err = _memfile("git-out"), _memfile("git-err")
    try:
        proc = subprocess.Popen(  # noqa: ASYNC220 - spawned here, waited for through a pidfd below
            ["git", *args], cwd=str(cwd), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            env={**os.environ, **GIT_ENV, **(env or {})},
        )
        try:
            while not await _exited(proc, 1.0):
                heartbeat()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        code = proc.wait()
        return GitRun(code, _read_all(out), _read_all(err))
    finally:
        os.close(out)
        os.close(err)


async def git(cwd: str | Path, *args: str, env: dict[str, str] | None = None,
              heartbeat: Heartbeat = _nothing) -> str:
    """`git args...` in `cwd`; its stripped output, or GitError."""
    ran = await git_run(cwd, *args, env=env, heartbeat=heartbeat)
    if ran.code != 0:
        raise GitError(args, ran.code, ran.err or ran.out)
    return ran.out.strip()


def try_flock(path: Path) -> IO[bytes] | None:
    """An exclusive lock on `path` if it is free right now, else None (never waits)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+b")  # noqa: SIM115 - kept open while the lock is held
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def release(handle: IO[bytes]) -> None:
    try:
        fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()


class FileLocks:
    """Exclusive locks on files, shared by the tasks of this process (an asyncio lock per path)
    and with other processes on the host (flock, polled from the event loop with heartbeats)."""

    def __init__(self) -> None:
        self._local: dict[Path, asyncio.Lock] = {}

    async def acquire(self, path: Path, heartbeat: Heartbeat = _nothing,
                      poll: float = 0.01) -> IO[bytes]:
        local = self._local.setdefault(path, asyncio.Lock())
        await local.acquire()
        try:
            last = time.monotonic()
            while (handle := try_flock(path)) is None:
                if time.monotonic() - last >= 0.5:
                    heartbeat()
                    last = time.monotonic()
                await asyncio.sleep(poll)
                poll = min(poll * 2, 0.1)
            return handle
        except BaseException:
            local.release()
            raise

    def release(self, path: Path, handle: IO[bytes]) -> None:
        try:
            release(handle)
        finally:
            self._local[path].release()
