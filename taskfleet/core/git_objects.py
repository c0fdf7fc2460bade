"""A clone's object store as shared storage for the board and run stores: every worker and the CLI
reach the clone, refs under `refs/taskfleet/` survive gc and are never pushed. Written in process
via libgit2 (no git process per object), refs by compare-and-swap under git's own lock file;
SHA-256 and reftable clones are refused with one line (`GitStoreError`)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

# Commits in the run store need an identity; a worker's machine may have none configured.
_IDENTITY = {
    "GIT_AUTHOR_NAME": "taskfleet",
    "GIT_AUTHOR_EMAIL": "taskfleet@localhost",
    "GIT_COMMITTER_NAME": "taskfleet",
    "GIT_COMMITTER_EMAIL": "taskfleet@localhost",
}

UNSUPPORTED = "libgit2 (pygit2), which taskfleet writes git objects with, reads neither"


class GitStoreError(RuntimeError):
    """A git command on the store failed; the message is git's own last line."""


def git(repo: str | Path, *args: str, data: bytes | None = None,
        env: dict[str, str] | None = None) -> bytes:
    """`git -C repo args...`; its stdout, or GitStoreError naming the command and git's reason."""
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], input=data, capture_output=True,
            env={**os.environ, **env} if env else None, check=False,
        )
    except OSError as err:
        raise GitStoreError(f"cannot run git: {err.strerror}") from None
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        raise GitStoreError(
            f"git {args[0]} in {repo}: {lines[-1] if lines else f'exit {done.returncode}'}")
    return done.stdout


# A libgit2 handle is not shared between threads: one per thread and folder, checked against the
# folder's identity so a clone made again is opened afresh.
_local = threading.local()


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def supported_problem(git_dir: str | Path) -> str:
    """Why libgit2 cannot be trusted with this clone (SHA-256 objects, reftable refs), or ""."""
    try:
        text = (Path(git_dir) / "config").read_text(errors="replace").lower()
    except OSError:
        text = ""
    if "objectformat" in text.replace(" ", "") and "sha256" in text:
        return f"{git_dir}: a SHA-256 clone: {UNSUPPORTED} SHA-256 clones nor reftable refs"
    if "refstorage" in text.replace(" ", "") or (Path(git_dir) / "reftable").exists():
        return f"{git_dir}: refs kept in a reftable: {UNSUPPORTED} SHA-256 clones nor reftable refs"
    return ""


def open_repository(repo: str | Path) -> pygit2.Repository:
    """This thread's libgit2 handle on `repo` (a clone, bare or not, or a worktree); GitStoreError
    when it is none, or one libgit2 cannot be trusted with."""
    key = os.path.abspath(repo)
    cache: dict = _local.__dict__.setdefault("repos", {})
    found = cache.get(key)
    if found is not None and found[1] == _identity(found[0].path) and found[1] is not None:
        return found[0]
    try:
        handle = pygit2.Repository(key, pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    except (pygit2.GitError, KeyError, ValueError) as err:
        if os.path.isdir(key):
            common = _common_dir_of(key)
            problem = supported_problem(common) if common else ""
            if problem:
                raise GitStoreError(problem) from None
        raise GitStoreError(f"{key} is not a git repository: {err}") from None
    problem = supported_problem(common_dir(handle))
    if problem:
        raise GitStoreError(problem)
    if len(cache) > 128:
        cache.clear()
    cache[key] = (handle, _identity(handle.path))
    return handle


def common_dir(handle: pygit2.Repository) -> str:
    path = Path(handle.path)
    try:
        text = (path / "commondir").read_text().strip()
    except OSError:
        return str(path)
    common = Path(text)
    return str(common if common.is_absolute() else (path / common).resolve())


def _common_dir_of(folder: str) -> str:
    """The git folder a `.git` leads to, for a clear refusal when libgit2 cannot open it."""
    dot = Path(folder) / ".git"
    if dot.is_dir():
        return str(dot)
    if (Path(folder) / "HEAD").is_file() and (Path(folder) / "objects").is_dir():
        return folder
    try:
        text = dot.read_text()
    except OSError:
        return ""
    if not text.startswith("gitdir: "):
        return ""
    admin = Path(text[len("gitdir: "):].strip())
    admin = admin if admin.is_absolute() else (Path(folder) / admin).resolve()
    try:
        common = Path((admin / "commondir").read_text().strip())
    except OSError:
        return str(admin)
    return str(common if common.is_absolute() else (admin / common).resolve())


def is_repository(repo: str | Path) -> bool:
    """True when `repo` is a git repository this process can read (a clone, bare or not)."""
    try:
        open_repository(repo)
    except GitStoreError:
        return False
    return True


def write_blob(repo: str | Path, data: bytes) -> str:
    return str(open_repository(repo).create_blob(data))


def write_tree(repo: str | Path, blobs: list[tuple[str, str]],
               trees: list[tuple[str, str]] = ()) -> str:
    """A tree of `blobs` and subtrees, each (name, id); libgit2 puts them in git's order."""
    handle = open_repository(repo)
    builder = handle.TreeBuilder()
    try:
        for name, oid in blobs:
            builder.insert(name, pygit2.Oid(hex=oid), FileMode.BLOB)
        for name, oid in trees:
            builder.insert(name, pygit2.Oid(hex=oid), FileMode.TREE)
        return str(builder.write())
    except (pygit2.GitError, ValueError) as err:
        raise GitStoreError(f"cannot write a tree in {repo}: {err}") from None


def signature() -> pygit2.Signature:
    return pygit2.Signature(_IDENTITY["GIT_COMMITTER_NAME"], _IDENTITY["GIT_COMMITTER_EMAIL"],
                            int(time.time()), 0)


def write_commit(repo: str | Path, tree: str, parent: str | None, message: str) -> str:
    """A commit as `git commit-tree -m message` makes it, by taskfleet's identity."""
    handle = open_repository(repo)
    who = signature()
    parents = [pygit2.Oid(hex=parent)] if parent else []
    oid = handle.create_commit(None, who, who, message.rstrip("\n") + "\n",
                               pygit2.Oid(hex=tree), parents)
    return str(oid)


def resolve(repo: str | Path, ref: str) -> str | None:
    """The object a ref points at, or None when it does not exist."""
    return _lookup(open_repository(repo), ref)


def branch_tip(repo: str | Path, branch: str, remote: str) -> str | None:
    """Where work on `branch` starts: the clone's own branch, or the remote's as the clone last saw
    it when that is ahead with nothing local on top (the merge queue lands from the clone without
    moving the clone's branch); whichever exists when only one does."""
    local = resolve(repo, f"refs/heads/{branch}")
    tracking = resolve(repo, f"refs/remotes/{remote}/{branch}")
    if local and tracking and local != tracking:
        if open_repository(repo).descendant_of(tracking, local):
            return tracking
    return local or tracking


def _lookup(handle: pygit2.Repository, ref: str) -> str | None:
    try:
        found = handle.references.get(ref)
    except (pygit2.GitError, ValueError):
        return None
    if found is None:
        return None
    try:
        return str(found.resolve().target)
    except (pygit2.GitError, KeyError):
        return None


def compare_and_swap(repo: str | Path, ref: str, new: str, old: str | None) -> bool:
    """Point `ref` at `new` only if it still points at `old` (None: absent), compared under git's
    `<ref>.lock`: of two racing writers one wins, the other (or a held lock) gets False."""
    return _set_ref(repo, ref, new, old, check_old=True)


def _set_ref(repo: str | Path, ref: str, new: str, old: str | None, check_old: bool) -> bool:
    handle = open_repository(repo)
    if not pygit2.reference_is_valid_name(ref):
        raise GitStoreError(f"not a valid ref name: {ref!r}")
    try:
        with handle.transaction() as txn:
            txn.lock_ref(ref)
            if check_old and _lookup(handle, ref) != old:
                raise _Moved
            txn.set_target(ref, pygit2.Oid(hex=new), message="taskfleet")
    except _Moved:
        return False
    except pygit2.GitError:
        # Locked by another writer, or a ref in the way (`a` against `a/b`): not changed.
        return False
    return True


class _Moved(Exception):
    pass


def keep(repo: str | Path, ref: str, oid: str) -> None:
    """Make `oid` reachable from `ref` (idempotent): content-addressed refs never change."""
    if resolve(repo, ref) == oid:
        return
    if not _set_ref(repo, ref, oid, None, check_old=False) and resolve(repo, ref) != oid:
        raise GitStoreError(f"cannot point {ref} at {oid} in {repo} (locked, or a ref in the way)")


class ObjectReader:
    """Reads objects in process (libgit2), one handle for the reader's life."""

    def __init__(self, repo: str | Path) -> None:
        self.repo = str(repo)
        self._handle: pygit2.Repository | None = None

    def read(self, spec: str) -> bytes | None:
        """The content of `spec` (an object id, or `<tree>:<path>`), None when it does not exist."""
        if self._handle is None:
            self._handle = open_repository(self.repo)
        try:
            found = self._handle.revparse_single(spec)
        except (KeyError, ValueError, pygit2.GitError):
            return None
        if isinstance(found, pygit2.Blob):
            return found.data
        return found.read_raw()

    def close(self) -> None:
        self._handle = None


@contextmanager
def object_reader(repo: str | Path) -> Iterator[ObjectReader]:
    reader = ObjectReader(repo)
    try:
        yield reader
    finally:
        reader.close()
