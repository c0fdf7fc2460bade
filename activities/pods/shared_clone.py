"""One clone shared by many pods: who owns which worktree, and git's own lock files. `git worktree
prune` would drop other pods' live worktrees (their folders are out of sight), so each pod adds
its worktrees locked with a reason naming it, removes only its own, and never prunes. Git's lock
files held by another pod are contention, not an error: `is_lock_contention` and `retry_delays`."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

OWNER_PREFIX = "taskfleet pod="

# What git prints when another process holds one of its lock files ("cannot lock ref ...: is at X
# but expected Y" is a lost compare-and-swap: not retried here).
_LOCK_CONTENTION = re.compile(
    r"Unable to create '[^']*\.lock': File exists"
    r"|could not lock config file [^\n]*: File exists"
    r"|Another git process seems to be running",
    re.IGNORECASE,
)


# Another pod's `git worktree add` is half done: its admin folder exists, its files not yet.
_WORKTREE_BEING_ADDED = re.compile(
    r"failed to read [^\n]*worktrees/[^/\n]+/(?:commondir|gitdir|HEAD)")


def is_lock_contention(stderr: str) -> bool:
    """Whether git failed only because another process held one of its lock files, or was in the
    middle of registering a worktree (both pass by themselves: retry)."""
    text = stderr or ""
    return bool(_LOCK_CONTENTION.search(text) or _WORKTREE_BEING_ADDED.search(text))


def retry_delays(total_seconds: float = 60.0, first: float = 0.02,
                 cap: float = 1.0) -> Iterator[float]:
    """Jittered exponential backoff, until `total_seconds` have been spent waiting."""
    spent, delay = 0.0, first
    while spent < total_seconds:
        wait = min(delay * (0.5 + random.random()), total_seconds - spent)
        spent += wait
        yield wait
        delay = min(delay * 2, cap)


def owner_reason(pod: str, lease: str = "") -> str:
    """`taskfleet pod=<pod> lease=<key>`: whose worktree it is, and the lease saying it is alive."""
    return f"{OWNER_PREFIX}{pod}" + (f" lease={lease}" if lease else "")


def _reason_fields(reason: str) -> dict[str, str]:
    first = reason.strip().splitlines()[0] if reason.strip() else ""
    if not first.startswith(OWNER_PREFIX):
        return {}
    return dict(part.split("=", 1) for part in first[len("taskfleet "):].split() if "=" in part)


def owner_of(reason: str) -> str:
    """The pod a lock reason names ("" when the worktree is not a taskfleet pod's)."""
    return _reason_fields(reason).get("pod", "")


def lease_of(reason: str) -> str:
    """The presence lease key a lock reason names ("" if none)."""
    return _reason_fields(reason).get("lease", "")


@dataclass
class Registration:
    """One linked worktree registered in the clone (`<common dir>/worktrees/<name>`)."""

    name: str
    admin_dir: Path
    path: Path  # the worktree folder (which may not exist where we look from)
    owner: str  # pod id from the lock reason; "" if unlocked or not ours
    lease: str = ""  # the owning worker's presence lease key, from the lock reason


def common_dir(clone: str | Path) -> Path:
    """The clone's git dir (shared by all its worktrees), without running git for a plain clone."""
    dot_git = Path(clone) / ".git"
    if dot_git.is_dir():
        return dot_git
    if Path(clone, "HEAD").is_file() and Path(clone, "objects").is_dir():
        return Path(clone)  # bare
    out = subprocess.run(
        ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
        cwd=clone, capture_output=True, text=True, check=True,
    )
    return Path(out.stdout.strip())


def registrations(clone: str | Path) -> list[Registration]:
    """Every linked worktree of the clone, read from its admin files (no git process)."""
    root = common_dir(clone) / "worktrees"
    out = []
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return out
    for name in names:
        admin = root / name
        try:
            gitdir = (admin / "gitdir").read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            continue
        try:
            reason = (admin / "locked").read_text()
        except FileNotFoundError:
            reason = ""
        out.append(
            Registration(name, admin, Path(gitdir).parent, owner_of(reason), lease_of(reason)))
    return out


def worktree_add_args(pod: str, lease: str = "") -> tuple[str, ...]:
    """Arguments for `git worktree add` that register the worktree locked, owned by `pod`."""
    return ("--lock", "--reason", owner_reason(pod, lease))


def forget_worktree(clone: str | Path, path: str | Path, pod: str) -> bool:
    """Remove `path`'s folder and registration if `pod` owns it: prune for one entry, ours only."""
    target = Path(os.path.abspath(path))
    for reg in registrations(clone):
        if reg.path == target:
            if reg.owner != pod:
                return False
            shutil.rmtree(target, ignore_errors=True)
            shutil.rmtree(reg.admin_dir, ignore_errors=True)
            return True
    shutil.rmtree(target, ignore_errors=True)
    return False


def prune_own(clone: str | Path, pod: str, keep: set[Path] | frozenset[Path] = frozenset(),
              delete_folders: bool = True) -> list[Path]:
    """Remove every worktree `pod` owns in the clone but `keep`; returns their paths. A dead pod's
    lease taker passes `delete_folders=False`: its folders are out of sight."""
    removed = []
    kept = {Path(os.path.abspath(p)) for p in keep}
    for reg in registrations(clone):
        if reg.owner == pod and reg.path not in kept:
            if delete_folders:
                shutil.rmtree(reg.path, ignore_errors=True)
            shutil.rmtree(reg.admin_dir, ignore_errors=True)
            removed.append(reg.path)
    return removed


def owners(clone: str | Path) -> set[str]:
    """Pods that own at least one worktree registered in the clone."""
    return {reg.owner for reg in registrations(clone) if reg.owner}


def git_retrying(cwd: str | Path, *args: str, total_seconds: float = 60.0) -> str:
    """`git args...` (blocking), retried on lock contention; for start-up and clean-up paths (tasks
    use the event-loop runner)."""
    delays = retry_delays(total_seconds)
    while True:
        ran = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                             stdin=subprocess.DEVNULL)
        if ran.returncode == 0:
            return ran.stdout.strip()
        if not is_lock_contention(ran.stderr):
            raise subprocess.CalledProcessError(ran.returncode, ["git", *args],
                                                ran.stdout, ran.stderr)
        wait = next(delays, None)
        if wait is None:
            raise subprocess.CalledProcessError(ran.returncode, ["git", *args],
                                                ran.stdout, ran.stderr)
        time.sleep(wait)


def forget_registrations(clone: str | Path, paths: set[Path] | list[Path], pod: str) -> list[Path]:
    """Drop the registrations of `paths` that `pod` owns, folders left alone: the one-entry `git
    worktree prune`, for many entries in one listing."""
    wanted = {Path(os.path.abspath(p)) for p in paths}
    dropped = []
    for reg in registrations(clone):
        if reg.path in wanted and reg.owner == pod:
            shutil.rmtree(reg.admin_dir, ignore_errors=True)
            dropped.append(reg.path)
    return dropped
