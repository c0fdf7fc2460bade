"""Move a pool slot's HEAD and its task branch by writing git's ref files, without a git process.

A task's set-up in a slot that is already a clean checkout of the task's base is only "point the
branch at the base, check the branch out": two tiny files. Spawning `git update-ref` and `git
symbolic-ref` for that cost two processes per task (milliseconds each, and CPU the tasks' own
commands need on a small machine). Here the same files are written the way git writes them:
`<file>.lock` created exclusively (so a git process writing the same ref at the same moment fails
or we do, never both), then renamed over the file. Loose refs win over `packed-refs`, so a packed
branch is simply shadowed, as `git update-ref` leaves it too. No reflog entry is written for these
moves (taskfleet's task branches are its own; the commit that carries the work is made by git).

Anything unusual (a `.git` that is not a worktree's link file, a ref path blocked by a file or a
folder of that name, a lock held by someone else) raises `RefWriteRefused`: the caller then runs
the git commands instead, which give the authoritative answer.
"""

from __future__ import annotations

from pathlib import Path

from taskfleet.core.git_op_validation import branch_name_problem
from taskfleet.core.loose_objects import NotPlain, ready_ref_path, write_locked


class RefWriteRefused(Exception):
    """The ref could not be written in-process; use git."""


def admin_dir(worktree: Path) -> Path:
    """The worktree's private folder in the clone (`.git/worktrees/<name>`), from its `.git` file."""
    link = worktree / ".git"
    if link.is_dir():
        raise RefWriteRefused(f"{link} is a clone's folder, not a worktree link")
    try:
        text = link.read_text()
    except OSError as err:
        raise RefWriteRefused(f"{worktree}/.git: {err}") from None
    if not text.startswith("gitdir: "):
        raise RefWriteRefused(f"{worktree}/.git is not a worktree link")
    path = Path(text[len("gitdir: "):].strip())
    return path if path.is_absolute() else (worktree / path).resolve()


def common_dir(admin: Path) -> Path:
    """The clone's shared git folder (where `refs/heads` live), from the worktree's `commondir`."""
    try:
        text = (admin / "commondir").read_text().strip()
    except OSError as err:
        raise RefWriteRefused(f"{admin}/commondir: {err}") from None
    path = Path(text)
    return path if path.is_absolute() else (admin / path).resolve()


def _write_locked(path: Path, content: str) -> None:
    """Write `path` as git does (`loose_objects.write_locked`); RefWriteRefused when it cannot."""
    try:
        written = write_locked(path, content)
    except NotPlain as err:
        raise RefWriteRefused(str(err)) from None
    if not written:
        raise RefWriteRefused(f"{path}.lock exists (another git process holds it)")


def point_branch(worktree: Path, branch: str, commit: str) -> None:
    """`git update-ref refs/heads/<branch> <commit>` + `git symbolic-ref HEAD refs/heads/<branch>`
    in the worktree, by file writes."""
    if branch_name_problem(branch) or len(commit) not in (40, 64):
        raise RefWriteRefused(f"not a plain branch and commit: {branch!r} {commit!r}")
    admin = admin_dir(worktree)
    heads = common_dir(admin) / "refs" / "heads"
    ref = heads.joinpath(*branch.split("/"))
    try:
        ready_ref_path(heads, ref)
    except NotPlain as err:
        raise RefWriteRefused(str(err)) from None
    _write_locked(ref, commit + "\n")
    _write_locked(admin / "HEAD", f"ref: refs/heads/{branch}\n")


def detach_head(worktree: Path, commit: str) -> None:
    """`git checkout --detach <commit>` for HEAD only (the index and files are left to `reset`)."""
    if len(commit) not in (40, 64):
        raise RefWriteRefused(f"not a commit id: {commit!r}")
    _write_locked(admin_dir(worktree) / "HEAD", commit + "\n")


def head_branch(worktree: Path) -> str:
    """The branch the worktree's HEAD names (`refs/heads/<branch>`), or "" when detached."""
    text = (admin_dir(worktree) / "HEAD").read_text().strip()
    return text[len("ref: refs/heads/"):] if text.startswith("ref: refs/heads/") else ""
