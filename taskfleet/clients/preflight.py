"""Checks `taskfleet run` and `taskfleet plan` make before they start anything: the clone, its base
branch and remote. A wrong `--repo` found here is one line and nothing starts, instead of failed
tasks and a batcher left running for a clone that does not exist."""

from __future__ import annotations

import os
import subprocess

from taskfleet.core.default_branch import default_branch
from taskfleet.core.errors import StartupError


def _git(repo: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30)


def check_clone(repo: str, base: str, remote: str,
                queue_target: str | None = None) -> tuple[str, str]:
    """The clone's absolute path and base branch (none named: the remote's default), or a
    `StartupError` saying what is wrong. With `queue_target`, that branch must be there too."""
    path = clone_top(repo, remote)
    base = base or default_base(repo, remote)
    if not has_branch(path, remote, base):
        raise StartupError(
            f"--repo {repo}: base branch {base!r} exists neither locally nor on {remote}; "
            "pass --base (markdown board) or set `base` in the board"
        )
    if queue_target is not None and not has_branch(path, remote, queue_target or base):
        raise StartupError(
            f"--repo {path}: the merge queue's target {queue_target or base!r} exists neither "
            f"locally nor on {remote}; set `queue_target` (or `base`) to a branch the remote has")
    return path, base


def clone_top(repo: str, remote: str) -> str:
    """The absolute path of `repo` once it is the top folder of a clone with `remote`, or a
    `StartupError` saying what is wrong (a subfolder would fail every task later, on the worker)."""
    path = os.path.abspath(repo)
    if not os.path.isdir(path):
        raise StartupError(f"--repo {repo}: no such folder ({path})")
    top = _git(path, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise StartupError(f"--repo {repo}: not a git repository ({path})")
    if os.path.realpath(top.stdout.strip()) != os.path.realpath(path):
        raise StartupError(f"--repo {repo}: is inside the clone {top.stdout.strip()}, not its top "
                           "folder; pass that instead")
    if _git(path, "remote", "get-url", remote).returncode != 0:
        remotes = _git(path, "remote").stdout.split()
        raise StartupError(
            f"--repo {repo}: has no remote {remote!r} (it has: {', '.join(remotes) or 'none'}); "
            "pass --remote or add one with `git remote add`"
        )
    return path


def has_branch(path: str, remote: str, branch: str) -> bool:
    return any(_git(path, "rev-parse", "--verify", "--quiet", ref).returncode == 0
               for ref in (f"refs/heads/{branch}", f"refs/remotes/{remote}/{branch}"))


def default_base(repo: str, remote: str) -> str:
    """The base of a board that names none: the remote's default branch (`<remote>/HEAD`)."""
    name = default_branch(os.path.abspath(repo), remote)
    if not name:
        raise StartupError(
            f"--repo {repo}: cannot tell the default branch of {remote} (no {remote}/HEAD, and the "
            "remote does not say); pass --base (markdown board) or set `base` in the board")
    return name
