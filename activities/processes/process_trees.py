"""How every process a task starts dies with its command and with its worker, chosen once per
worker: `pid-namespace` (preferred: a tiny `sh` init in its own PID namespace via `unshare`; the
kernel kills all left in it) or `process-group` (fallback: group, tokens in the environment, a
watchdog, retries that kill their task key's processes). See docs/architecture.md."""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("taskfleet.process_trees")

SETTING = "TASKFLEET_PROCESS_TREES"
MODE_AUTO = "auto"
MODE_NAMESPACE = "pid-namespace"
MODE_GROUP = "process-group"
MODES = (MODE_AUTO, MODE_NAMESPACE, MODE_GROUP)
# The init of a task's namespace runs the command as its child: an init ignores signals it has no
# handler for, and `kill $$` would stop working.
INIT = ("sh", "-c", '"$@"\nexit $?', "taskfleet-init")
_NAMESPACE_FLAGS = ("--pid", "--fork", "--kill-child", "--mount-proc")
WATCHDOG = Path(__file__).with_name("orphan_watchdog.py")


class ProcessTreesUnavailable(RuntimeError):
    """`pid-namespace` was asked for, and this machine does not allow it; the message says why."""


@dataclass(frozen=True)
class ProcessTrees:
    """The mechanism in force: `prefix` is put before every command's argv."""

    mode: str
    prefix: tuple[str, ...] = ()
    why: str = ""
    # process-group without `setpriv`: the death signal is set by a `preexec_fn` hook instead
    preexec: bool = False

    @property
    def namespaced(self) -> bool:
        return self.mode == MODE_NAMESPACE

    def describe(self) -> str:
        return f"{self.mode} ({self.why})"


@functools.cache
def setpriv() -> str | None:
    """util-linux `setpriv` sets PR_SET_PDEATHSIG and execs, keeping Python's fast vfork start (a
    `preexec_fn` costs ms of the event loop per command)."""
    if not sys.platform.startswith("linux") or os.environ.get("TASKFLEET_NO_SETPRIV"):
        return None
    return shutil.which("setpriv")


def _death_prefix() -> tuple[str, ...]:
    tool = setpriv()
    return (tool, "--pdeathsig", "KILL", "--") if tool else ()


def _group(why: str) -> ProcessTrees:
    prefix = _death_prefix()
    return ProcessTrees(MODE_GROUP, prefix, why, preexec=not prefix)


def _probe(prefix: tuple[str, ...]) -> str:
    """"" when a command under `prefix` is its init's child in its own namespace; else why not."""
    try:
        ran = subprocess.run([*prefix, "sh", "-c", 'test "$$" = 2'], capture_output=True, text=True,
                             timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as err:
        return str(err)
    if ran.returncode == 0:
        return ""
    lines = (ran.stderr or ran.stdout).strip().splitlines()
    return lines[-1][:200] if lines else f"exit code {ran.returncode}"


@functools.cache
def detect(requested: str = MODE_AUTO) -> ProcessTrees:
    """The mechanism for `requested` (auto: the namespace where the kernel allows it)."""
    if requested not in MODES:
        raise ProcessTreesUnavailable(f"{SETTING}={requested!r}: use one of {', '.join(MODES)}")
    if requested == MODE_GROUP:
        return _group("asked for")
    unshare = shutil.which("unshare") if sys.platform.startswith("linux") else None
    if unshare is None:
        return _refuse(requested, "util-linux `unshare` is not installed")
    variants = [(unshare, *_NAMESPACE_FLAGS)]
    if os.geteuid() != 0:
        variants = [(unshare, "--user", "--map-current-user", *_NAMESPACE_FLAGS)]
    reasons = []
    for variant in variants:
        prefix = (*_death_prefix(), *variant, "--", *INIT)
        problem = _probe(prefix)
        if not problem:
            what = "unprivileged user namespace" if "--user" in variant else "root"
            return ProcessTrees(MODE_NAMESPACE, prefix, f"{' '.join(variant[1:])}, as {what}")
        reasons.append(problem)
    return _refuse(requested, f"PID namespaces are not permitted here ({'; '.join(reasons)})")


def _refuse(requested: str, why: str) -> ProcessTrees:
    if requested == MODE_NAMESPACE:
        raise ProcessTreesUnavailable(f"{SETTING}={MODE_NAMESPACE}: {why}")
    return _group(why)


class Watchdog:
    """In process-group mode: one process per worker that outlives it just long enough to kill every
    process carrying its executor tokens, told of its death by a pipe only the worker writes."""

    _started: dict[int, subprocess.Popen] = {}

    @classmethod
    def ensure(cls, variable: str) -> int:
        """Start this process's watchdog once; its pid."""
        me = os.getpid()
        running = cls._started.get(me)
        if running is not None and running.poll() is None:
            return running.pid
        read, write = os.pipe()  # neither end is inherited by commands (PEP 446)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", str(WATCHDOG), str(me), variable, f"{me}-"], stdin=read,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        finally:
            os.close(read)
        cls._started[me] = proc
        cls._pipe = write  # held open for the worker's life: its closing is the news
        return proc.pid
