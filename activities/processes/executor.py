"""Running a board's command (executor or verification) in a task's worktree, with `sh -c`: task
fields reach it as environment variables, never in the command line. It dies with its timeout,
its activity or its worker (process_trees.py); output goes to the task's log. A command with no
shell syntax is exec'd directly, as make does: one process fewer."""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from taskfleet.activities.processes.executor_policy import current_policy
from taskfleet.activities.processes.executor_records import no_detached_git_maintenance

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
    """Wait up to `timeout` for the process to exit, without reaping it: a pidfd in the event loop's
    selector (asyncio's child watchers lost wake-ups under the worker). Elsewhere, poll."""
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
    # The leader is not reaped yet, so its pid (the group id) cannot have been reused.
    _kill_group(proc.pid, signal.SIGKILL)
    proc.wait()


# Words only of these characters mean the same to `sh -c` as to exec (no quoting, expansion,
# globbing, redirection or operators).
_PLAIN_WORDS = re.compile(r"[A-Za-z0-9_./,:+=@%^-]+(?:[ \t]+[A-Za-z0-9_./,:+=@%^-]+)*")
# dash's builtins and reserved words: these run inside the shell, so they go through `sh`.
_SHELL_WORDS = frozenset(". : [ alias bg break case cd chdir command continue do done echo elif "
                         "else esac eval exec exit export false fc fg fi for getopts hash if in "
                         "jobs kill local printf pwd read readonly return set shift test then "
                         "times trap true type ulimit umask unalias unset until wait while".split())


def direct_argv(command: str) -> list[str] | None:
    """The argv `sh -c command` would exec, when the command has no shell syntax; else None."""
    command = command.strip()
    if not _PLAIN_WORDS.fullmatch(command):
        return None
    words = command.split()
    if words[0] in _SHELL_WORDS or "=" in words[0]:
        return None  # a builtin, or a variable assignment
    return words


_PR_SET_PDEATHSIG = 1


@functools.cache
def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A `preexec_fn` making the command's leader die with the worker (so it writes into no worktree
    a retry uses); the rest of its group is killed from the record at the next worker start."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the worker died before the hook ran
            os._exit(137)

    return hook


def _runnable(program: str, cwd: Path, env: dict[str, str]) -> bool:
    if "/" in program:
        path = program if os.path.isabs(program) else os.path.join(cwd, program)
        return os.path.isfile(path) and os.access(path, os.X_OK)
    return shutil.which(program, path=env.get("PATH", os.defpath)) is not None


def _start(command: str, cwd: Path, env: dict[str, str], log: BinaryIO,
           stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> subprocess.Popen:
    """Start `command` under the worker's rules: the environment they give a task, and its process
    tree in a PID namespace of its own (or its own process group), dying with the worker."""
    policy = current_policy()
    env = policy.environment.build(env)
    no_detached_git_maintenance(env)
    trees = policy.trees
    options = dict(cwd=str(cwd), env=env, stdin=stdin if stdin is not None else subprocess.DEVNULL,
                   stdout=stdout if stdout is not None else log,
                   stderr=log if stdout is not None else subprocess.STDOUT, start_new_session=True)
    argv = direct_argv(command)
    if not trees.preexec:
        if argv is None or not _runnable(argv[0], cwd, env):
            argv = ["sh", "-c", command]  # not found, not executable: `sh` says so (127, 126)
        return subprocess.Popen([*trees.prefix, *argv], **options)
    options["preexec_fn"] = _die_with_parent_hook()
    if argv is not None:
        try:
            return subprocess.Popen(argv, **options)
        except OSError:
            pass
    return subprocess.Popen(["sh", "-c", command], **options)


async def run_command(
    command: str,
    cwd: Path,
    env: dict[str, str],
    log: BinaryIO,
    timeout: float,
    heartbeat: Callable[[], None],
    label: str,
    heartbeat_every: float = 1.0,
    on_start: Callable[[int], None] | None = None,
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
) -> CommandResult:
    """Run `command` to completion or timeout, output appended to `log` (with `stdout`, only
    stderr); the worker's rules decide its environment. `on_start(pid)` hears its group id."""
    started = time.monotonic()
    log.write(f"\n$ ({label}) {command}\n".encode())
    log.flush()
    proc = _start(command, cwd, env, log, stdin, stdout)
    try:
        if on_start is not None:
            on_start(proc.pid)
        deadline = started + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                await _stop(proc)
                log.write(f"\n[taskfleet] {label} timed out after {timeout:g}s\n".encode())
                log.flush()
                return CommandResult(None, time.monotonic() - started, True)
            if await _exited(proc, min(heartbeat_every, remaining)):
                code = proc.wait()
                # Killed by a signal: reported as `sh` would, 128 + the signal's number.
                return CommandResult(128 - code if code < 0 else code,
                                     time.monotonic() - started, False)
            heartbeat()
    except BaseException:
        # Cancelled (or anything else): nothing we started may outlive the activity.
        await asyncio.shield(_stop(proc))
        raise


def tail(log: BinaryIO, limit: int = TAIL_BYTES) -> str:
    """The last `limit` bytes of a log opened `a+b`, read without moving its write position."""
    try:
        log.flush()
        size = os.fstat(log.fileno()).st_size
        return os.pread(log.fileno(), limit, max(0, size - limit)).decode(errors="replace")
    except OSError:
        return ""
