"""Removing the pool slots that no live worker owns: what a crashed worker (kill -9) left behind.
Runs at worker start: a slot whose lock can be taken is a leftover. Only this pod's registrations
are dropped (other pods keep theirs); a drain's `.trash` cut short by shutdown is deleted too."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from taskfleet.activities.git.git_async import GIT_ENV, release, try_flock
from taskfleet.activities.pods.shared_clone import forget_registrations, registrations


def remove_leftovers(root: Path, pod: str) -> list[Path]:
    """Remove slots under `root` that no live worker owns; returns what was removed. The caller
    kills leftover executors first."""
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        shutil.rmtree(folder / ".trash", ignore_errors=True)  # a drain cut short
        repo_file = folder / "REPO"
        if not repo_file.exists():
            continue
        repo_path = repo_file.read_text().strip()
        with open(folder / ".lock", "a+b") as clone_lock:
            fcntl.flock(clone_lock, fcntl.LOCK_EX)  # at start: no task waits behind us
            try:
                removed += _remove_in_folder(folder, repo_path, pod)
            finally:
                fcntl.flock(clone_lock, fcntl.LOCK_UN)
    return removed


def _remove_in_folder(folder: Path, repo_path: str, pod: str) -> list[Path]:
    removed = []
    locks = {p.name[: -len(".lock")]: p for p in folder.glob("*.lock") if p.name != ".lock"}
    dirs = {p.name: p for p in folder.iterdir() if p.is_dir()}
    for name in sorted(set(locks) | set(dirs)):
        handle = try_flock(locks[name]) if name in locks else None
        if name in locks and handle is None:
            continue  # a live worker owns it
        try:
            stale = folder / name
            if stale.exists():
                done = subprocess.run(
                    ["git", "worktree", "remove", "--force", "--force", str(stale)], cwd=repo_path,
                    capture_output=True, env={**os.environ, **GIT_ENV}, check=False,
                ) if os.path.isdir(repo_path) else None
                if done is None or done.returncode != 0:
                    shutil.rmtree(stale, ignore_errors=True)
                removed.append(stale)
        finally:
            if handle is not None:
                release(handle)
            if name in locks:
                locks[name].unlink(missing_ok=True)
    if os.path.isdir(repo_path):
        # Registrations of this folder's slots that no live process of this pod holds (only
        # ours: `git worktree prune` would take other pods' registrations too).
        live = {name for name, lock in locks.items() if lock.exists()}
        dead = [reg.path for reg in registrations(repo_path)
                if reg.path.parent == folder and reg.path.name not in live]
        forget_registrations(repo_path, dead, pod)
    return removed
