"""Task worktrees: one per task, on the task's branch, created and removed one at a time per clone.

Parallel `git worktree add` calls race on the clone's shared locks, so add/remove hold a per-clone
file lock (which also serializes worker processes on one host). Each live worktree holds a lock
file of its own; at worker start, worktrees whose lock nobody holds are leftovers of a crash and
are removed. Branches are always kept.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from git import Repo
from git.exc import GitCommandError
from taskfleet.activities.support.git_op_application import OpFailed, SymbolicReference

from taskfleet.core.ids import slug

TASK_TRAILER = "Taskfleet-Task"
RUN_TRAILER = "Taskfleet-Run"


@dataclass
class Worktree:
    path: Path
    base_commit: str
    resumed_commit: str  # the task's commit from an earlier attempt of the same run, if any
    lock: IO[bytes]


def _locked(path: Path, blocking: bool = True) -> IO[bytes] | None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+b")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _release(handle: IO[bytes]) -> None:
    fcntl.flock(handle, fcntl.LOCK_UN)
    handle.close()


class WorktreeManager:
    def __init__(self, root: Path) -> None:
        self.root = root

    def repo_dir(self, repo: str) -> Path:
        digest = hashlib.sha256(os.path.abspath(repo).encode()).hexdigest()[:8]
        return self.root / f"{slug(os.path.basename(os.path.abspath(repo)))}-{digest}"

    def path_for(self, repo: str, task_id: str) -> Path:
        return self.repo_dir(repo) / slug(task_id, 64)

    @contextmanager
    def _repo_lock(self, repo: str) -> Iterator[None]:
        folder = self.repo_dir(repo)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "REPO").write_text(os.path.abspath(repo))
        handle = _locked(folder / ".lock")
        assert handle is not None
        try:
            yield
        finally:
            _release(handle)

    def create(self, repo_path: str, remote: str, task_id: str, branch: str, base: str, run_key: str) -> Worktree:
        """The task's worktree on `branch`; reset to `base` unless this run already committed there."""
        path = self.path_for(repo_path, task_id)
        task_lock = _locked(path.with_suffix(".lock"))
        assert task_lock is not None
        try:
            with self._repo_lock(repo_path):
                repo = Repo(repo_path)
                base_commit = _resolve(repo, base, remote)
                if path.exists():
                    _remove(repo, path)
                tip = _resolve(repo, branch, None, required=False)
                resumed = ""
                if tip and tip != base_commit:
                    message = repo.commit(tip).message
                    if f"{TASK_TRAILER}: {task_id}" in message and f"{RUN_TRAILER}: {run_key}" in message:
                        resumed = tip
                if resumed:
                    repo.git.worktree("add", "-f", str(path), branch)
                else:
                    repo.git.worktree("add", "-f", "-B", branch, str(path), base_commit)
                repo.close()
        except BaseException:
            _release(task_lock)
            raise
        return Worktree(path, base_commit, resumed, task_lock)

    def remove(self, repo_path: str, worktree: Worktree) -> None:
        try:
            with self._repo_lock(repo_path):
                repo = Repo(repo_path)
                _remove(repo, worktree.path)
                repo.close()
        finally:
            _release(worktree.lock)
            worktree.path.with_suffix(".lock").unlink(missing_ok=True)

    def prune_stale(self) -> list[Path]:
        """Remove worktrees that no live task holds (a crashed worker's); returns what was removed."""
        removed: list[Path] = []
        if not self.root.is_dir():
            return removed
        for folder in sorted(p for p in self.root.iterdir() if p.is_dir()):
            repo_file = folder / "REPO"
            if not repo_file.exists():
                continue
            repo_path = repo_file.read_text().strip()
            for lock_path in sorted(folder.glob("*.lock")):
                if lock_path.name == ".lock":
                    continue
                handle = _locked(lock_path, blocking=False)
                if handle is None:
                    continue  # a live task holds it
                try:
                    stale = lock_path.with_suffix("")
                    if stale.exists():
                        with self._repo_lock(repo_path):
                            try:
                                repo = Repo(repo_path)
                            except Exception:  # noqa: BLE001 - the clone itself is gone
                                shutil.rmtree(stale, ignore_errors=True)
                            else:
                                _remove(repo, stale)
                                repo.close()
                        removed.append(stale)
                finally:
                    _release(handle)
                    lock_path.unlink(missing_ok=True)
        return removed


def _resolve(repo: Repo, branch: str, remote: str | None, required: bool = True) -> str:
    refs = [f"refs/heads/{branch}"] + ([f"refs/remotes/{remote}/{branch}"] if remote else [])
    for ref in refs:
        try:
            return SymbolicReference.dereference_recursive(repo, ref)
        except ValueError:
            continue
    if required:
        raise OpFailed(f"branch {branch} does not exist in {repo.working_dir}" + (f" nor on {remote}" if remote else ""))
    return ""


def _remove(repo: Repo, path: Path) -> None:
    try:
        repo.git.worktree("remove", "--force", "--force", str(path))
    except GitCommandError:
        shutil.rmtree(path, ignore_errors=True)
    repo.git.worktree("prune")
