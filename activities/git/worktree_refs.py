"""Move a pool slot's HEAD and its task branch in process (libgit2): set-up on a clean slot is two
ref writes, not two git processes per task. Written as git does (`<file>.lock` created
exclusively, then renamed; names that clash with a ref refused); anything unusual raises
`RefWriteRefused` and the caller runs git, whose answer is authoritative."""

from __future__ import annotations

from pathlib import Path

import pygit2

from taskfleet.core.git_objects import GitStoreError, open_repository
from taskfleet.core.git_op_validation import branch_name_problem


class RefWriteRefused(Exception):
    """The ref could not be written in-process; use git."""


def admin_dir(worktree: Path) -> Path:
    """The worktree's private folder in the clone (`.git/worktrees/<name>`), from its `.git`."""
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
    """The clone's shared git folder (where `refs/heads` live); RefWriteRefused for a clone whose
    refs are not files (reftable: its HEAD file is a placeholder git never reads)."""
    try:
        text = (admin / "commondir").read_text().strip()
    except OSError as err:
        raise RefWriteRefused(f"{admin}/commondir: {err}") from None
    path = Path(text)
    common = path if path.is_absolute() else (admin / path).resolve()
    if (common / "reftable").exists() or (admin / "reftable").exists():
        raise RefWriteRefused(f"{common} keeps its refs in a reftable")
    return common


def _slot_repository(worktree: Path) -> pygit2.Repository:
    admin = admin_dir(worktree)
    common_dir(admin)  # refs kept in files, or refused
    try:
        return open_repository(worktree)
    except GitStoreError as err:
        raise RefWriteRefused(str(err)) from None


def _refused(err: Exception, what: str, repo: pygit2.Repository, ref: str) -> RefWriteRefused:
    text = str(err)
    if "collides" in text or "directory" in text or "beneath" in text:
        return RefWriteRefused(
            f"{ref}: {_collision(repo, ref)}; git refuses such a pair, loose or packed")
    if "failed to lock" in text:
        return RefWriteRefused(f"{what}: a .lock exists (another git process holds it)")
    return RefWriteRefused(f"{what}: {text}")


def _collision(repo: pygit2.Repository, ref: str) -> str:
    """Which existing ref is in the way of `ref` (a shorter name, or names under it)."""
    parts = ref.split("/")
    for i in range(3, len(parts)):
        shorter = "/".join(parts[:i])
        if repo.references.get(shorter) is not None:
            return f"{shorter} is a ref, not a folder"
    under = next((name for name in repo.references if name.startswith(ref + "/")), "")
    return f"it is a folder of refs ({under})" if under else "another ref is in the way"


def point_branch(worktree: Path, branch: str, commit: str) -> None:
    """`git update-ref refs/heads/<branch> <commit>` + `git symbolic-ref HEAD refs/heads/<branch>`,
    in process."""
    if branch_name_problem(branch) or len(commit) not in (40, 64):
        raise RefWriteRefused(f"not a plain branch and commit: {branch!r} {commit!r}")
    repo = _slot_repository(worktree)
    ref = f"refs/heads/{branch}"
    try:
        repo.references.create(ref, pygit2.Oid(hex=commit), force=True)
    except (pygit2.GitError, OSError) as err:
        raise _refused(err, ref, repo, ref) from None
    try:
        repo.set_head(ref)
    except (pygit2.GitError, OSError) as err:
        raise _refused(err, f"{worktree} HEAD", repo, ref) from None


def detach_head(worktree: Path, commit: str) -> None:
    """`git checkout --detach <commit>` for HEAD only (the index and files are left to `reset`)."""
    if len(commit) not in (40, 64):
        raise RefWriteRefused(f"not a commit id: {commit!r}")
    repo = _slot_repository(worktree)
    try:
        repo.set_head(pygit2.Oid(hex=commit))
    except (pygit2.GitError, OSError, ValueError) as err:
        raise _refused(err, f"{worktree} HEAD", repo, "HEAD") from None


def head_branch(worktree: Path) -> str:
    """The branch the worktree's HEAD names (`refs/heads/<branch>`), or "" when detached."""
    admin = admin_dir(worktree)
    common_dir(admin)  # refs kept in files, or refused
    return _branch_of_head(admin / "HEAD")


def _branch_of_head(head: Path) -> str:
    text = head.read_text(errors="replace").strip()
    return text[len("ref: refs/heads/"):] if text.startswith("ref: refs/heads/") else ""


_SLOT_ADMINS: set[Path] = set()  # admin folders seen locked as slots (names are random)


def checked_out_elsewhere(worktree: Path, branch: str) -> str:
    """Where else a person has `branch` checked out (the clone, or a non-slot worktree), or "":
    moving it would turn their work into staged changes. RefWriteRefused: refs are not files."""
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
