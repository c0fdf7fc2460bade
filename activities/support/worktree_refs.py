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
from taskfleet.core.loose_objects import NotPlain, packed_conflict, ready_ref_path, write_locked


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
    """The clone's shared git folder (where `refs/heads` live), from the worktree's `commondir`;
    RefWriteRefused for a clone whose refs are not files (reftable: its HEAD file is a placeholder
    git never reads, so a write there would change nothing)."""
    try:
        text = (admin / "commondir").read_text().strip()
    except OSError as err:
        raise RefWriteRefused(f"{admin}/commondir: {err}") from None
    path = Path(text)
    common = path if path.is_absolute() else (admin / path).resolve()
    if (common / "reftable").exists() or (admin / "reftable").exists():
        raise RefWriteRefused(f"{common} keeps its refs in a reftable")
    return common


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
    common = common_dir(admin)
    heads = common / "refs" / "heads"
    ref = heads.joinpath(*branch.split("/"))
    try:
        ready_ref_path(heads, ref)
        if packed_conflict(common, f"refs/heads/{branch}"):
            raise NotPlain(f"refs/heads/{branch} conflicts with a packed ref")
    except NotPlain as err:
        raise RefWriteRefused(str(err)) from None
    _write_locked(ref, commit + "\n")
    _write_locked(admin / "HEAD", f"ref: refs/heads/{branch}\n")


def detach_head(worktree: Path, commit: str) -> None:
    """`git checkout --detach <commit>` for HEAD only (the index and files are left to `reset`)."""
    if len(commit) not in (40, 64):
        raise RefWriteRefused(f"not a commit id: {commit!r}")
    admin = admin_dir(worktree)
    common_dir(admin)  # refs kept in files, or refused
    _write_locked(admin / "HEAD", commit + "\n")


def head_branch(worktree: Path) -> str:
    """The branch the worktree's HEAD names (`refs/heads/<branch>`), or "" when detached."""
    admin = admin_dir(worktree)
    common_dir(admin)  # refs kept in files, or refused
    return _branch_of_head(admin / "HEAD")


def _branch_of_head(head: Path) -> str:
    text = head.read_text(errors="replace").strip()
    return text[len("ref: refs/heads/"):] if text.startswith("ref: refs/heads/") else ""


_SLOT_ADMINS: set[Path] = set()  # admin folders seen locked as taskfleet slots (names are random)


def checked_out_elsewhere(worktree: Path, branch: str) -> str:
    """Where else `branch` is checked out, by a person (the clone itself, or a worktree that is not
    a taskfleet slot), or "". Moving it under them would turn their work into staged changes
    against the base; slots (locked with a `taskfleet pod=` reason) only name a branch between a
    task's end and their scrub. RefWriteRefused when the clone's layout cannot be read as files."""
    admin = admin_dir(worktree)
    common = common_dir(admin)
    heads = [(common / "HEAD", str(common.parent) if common.name == ".git" else str(common))]
    folder = common / "worktrees"
    for other in (folder.iterdir() if folder.is_dir() else []):
        if other == admin or other in _SLOT_ADMINS:
            continue
        try:
            if (other / "locked").read_text(errors="replace").startswith("taskfleet pod="):
                _SLOT_ADMINS.add(other)  # a slot stays one: its lock reason is never changed
                continue
        except OSError:
            pass
        try:
            where = (other / "gitdir").read_text(errors="replace").strip().removesuffix("/.git")
        except OSError:
            where = str(other)
        heads.append((other / "HEAD", where))
    for head, where in heads:
        try:
            if _branch_of_head(head) == branch:
                return where
        except OSError:
            continue
    return ""
