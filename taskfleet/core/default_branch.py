"""The branch a board lands on when it names no `base`: the remote's default branch
(`<remote>/HEAD`, else `git ls-remote --symref`, else `main` or `master`). Shared by the CLI and
the worker, so both answer alike."""

from __future__ import annotations

import subprocess


def _git(repo: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout, check=False)


def _exists(repo: str, ref: str) -> bool:
    return _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").returncode == 0


def default_branch(repo: str, remote: str = "origin") -> str | None:
    """The remote's default branch as this clone can tell it, or None when nothing says."""
    head = _git(repo, "symbolic-ref", "--quiet", f"refs/remotes/{remote}/HEAD")
    prefix = f"refs/remotes/{remote}/"
    if head.returncode == 0 and head.stdout.strip().startswith(prefix):
        return head.stdout.strip()[len(prefix):]
    try:
        asked = _git(repo, "ls-remote", "--symref", remote, "HEAD", timeout=60)
    except subprocess.TimeoutExpired:
        asked = None
    if asked is not None and asked.returncode == 0:
        for line in asked.stdout.splitlines():
            if line.startswith("ref: refs/heads/") and line.endswith("\tHEAD"):
                return line[len("ref: refs/heads/"):-len("\tHEAD")]
    for name in ("main", "master"):
        if _exists(repo, f"refs/remotes/{remote}/{name}") or _exists(repo, f"refs/heads/{name}"):
            return name
    return None
