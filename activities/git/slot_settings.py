"""What a pool slot's own folder in the clone says about it, read without walking its tree: what a
task left that a scrub would not undo (own worktree config, sparse patterns, assume-unchanged or
skip-worktree entries), and whether the index file is unchanged since the task began."""

from __future__ import annotations

import os
import re
from pathlib import Path

from taskfleet.activities.git.git_async import git
from taskfleet.activities.git.worktree_refs import RefWriteRefused, admin_dir

# `ls-files -v`: assume-unchanged or skip-worktree
_FLAGGED = re.compile(r"^(?:[a-z]|S )", re.MULTILINE)


_ADMIN_DIRS: dict[str, str] = {}  # slot -> its admin folder (a slot's `.git` link never changes)


def _admin(path: Path) -> str:
    key = str(path)
    found = _ADMIN_DIRS.get(key)
    if found is None:
        found = str(admin_dir(path))
        if len(_ADMIN_DIRS) > 4096:
            _ADMIN_DIRS.clear()
        _ADMIN_DIRS[key] = found
    return found


def _read(file: Path) -> bytes:
    try:
        return file.read_bytes()
    except OSError:
        return b""


def index_stamp(path: Path) -> tuple:
    """The slot's index file as the file system sees it (inode, size, times); () when unreadable."""
    try:
        st = os.stat(os.path.join(_admin(path), "index"))
    except (OSError, RefWriteRefused):
        return ()
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def settings_files(path: Path) -> tuple[bytes, bytes]:
    """The slot's own worktree config and sparse-checkout patterns (see `slot_settings`)."""
    try:
        admin = Path(_admin(path))
    except (RefWriteRefused, OSError):
        return b"?", b"?"
    return _read(admin / "config.worktree"), _read(admin / "info" / "sparse-checkout")


async def slot_settings(path: Path) -> tuple[bytes, bytes, bool]:
    """What an executor can set on a slot that `reset --hard` and `clean` keep: own worktree config,
    sparse-checkout patterns, and whether an index entry is assume-unchanged or skip-worktree."""
    try:
        admin = admin_dir(path)
    except RefWriteRefused:
        return b"?", b"?", True
    listed = await git(path, "ls-files", "-v")
    return (_read(admin / "config.worktree"), _read(admin / "info" / "sparse-checkout"),
            bool(_FLAGGED.search(listed)))
