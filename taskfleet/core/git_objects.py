"""A clone's object store as shared storage: what the board and run stores write and read.

Every worker of a board and the CLI that starts it reach the clone (tasks branch from it), while
a worker's state dir is its own. So boards and outcomes live in the clone as git objects, kept
reachable by refs under `refs/taskfleet/`, which `git gc` keeps and `git push` never sends.

Plain `git` processes rather than GitPython: the CLI imports this too (GitPython runs `git` at
import), and reads stream through one `git cat-file --batch` process instead of one per object.
Writes (objects and refs) go in-process through `loose_objects` when the repository is the plain
case, with git as the fallback.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from taskfleet.core import loose_objects

# Commits in the run store need an identity; a worker's machine may have none configured.
_IDENTITY = {
    "GIT_AUTHOR_NAME": "taskfleet",
    "GIT_AUTHOR_EMAIL": "taskfleet@localhost",
    "GIT_COMMITTER_NAME": "taskfleet",
    "GIT_COMMITTER_EMAIL": "taskfleet@localhost",
}


class GitStoreError(RuntimeError):
    """A git command on the store failed; the message is git's own last line."""


def git(repo: str | Path, *args: str, data: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    """Run `git -C repo args...`; its stdout, or GitStoreError naming the command and git's reason."""
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], input=data, capture_output=True,
            env={**os.environ, **env} if env else None, check=False,
        )
    except OSError as err:
        raise GitStoreError(f"cannot run git: {err.strerror}") from None
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        raise GitStoreError(f"git {args[0]} in {repo}: {lines[-1] if lines else f'exit {done.returncode}'}")
    return done.stdout


def is_repository(repo: str | Path) -> bool:
    """True when `repo` is a git repository this process can read (a clone, bare or not)."""
    try:
        loose_objects.layout(repo)  # asked of git once per process and folder
        return True
    except loose_objects.NotPlain:
        pass
    try:
        git(repo, "rev-parse", "--git-dir")
    except GitStoreError:
        return False
    return True


# Writes go in-process (`loose_objects`: the same files git writes, no process per object) and
# fall back to the git command whenever the repository is not the plain case.


def write_blob(repo: str | Path, data: bytes) -> str:
    try:
        return loose_objects.write_object(repo, "blob", data)
    except loose_objects.NotPlain:
        return git(repo, "hash-object", "-w", "--stdin", data=data).decode().strip()


def write_tree(repo: str | Path, blobs: list[tuple[str, str]], trees: list[tuple[str, str]] = ()) -> str:
    """A tree of `blobs` and subtrees, each (name, id); in git's own order."""
    try:
        return loose_objects.write_object(repo, "tree", loose_objects.tree_content(blobs, list(trees)))
    except loose_objects.NotPlain:
        pass
    listing = "".join(f"100644 blob {oid}\t{name}\n" for name, oid in blobs)
    listing += "".join(f"040000 tree {oid}\t{name}\n" for name, oid in trees)
    return git(repo, "mktree", data=listing.encode()).decode().strip()


def write_commit(repo: str | Path, tree: str, parent: str | None, message: str) -> str:
    try:
        content = loose_objects.commit_content(tree, parent, message, _IDENTITY["GIT_COMMITTER_NAME"],
                                               _IDENTITY["GIT_COMMITTER_EMAIL"])
        return loose_objects.write_object(repo, "commit", content)
    except loose_objects.NotPlain:
        pass
    args = ["commit-tree", tree, *(["-p", parent] if parent else []), "-m", message]
    return git(repo, *args, env=_IDENTITY).decode().strip()


def resolve(repo: str | Path, ref: str) -> str | None:
    """The object a ref points at, or None when it does not exist."""
    try:
        return loose_objects.read_ref(repo, ref)
    except loose_objects.NotPlain:
        pass
    try:
        out = git(repo, "rev-parse", "--verify", "--quiet", ref)
    except GitStoreError:
        return None
    return out.decode().strip() or None


def compare_and_swap(repo: str | Path, ref: str, new: str, old: str | None) -> bool:
    """Point `ref` at `new` only if it still points at `old` (None: only if it does not exist).

    The ref's lock file is taken and the value compared under it (by git's rules, in-process or by
    git), so of two writers racing from the same `old` exactly one wins; the other gets False and
    retries from the new value.
    """
    try:
        return loose_objects.update_ref(repo, ref, new, old)
    except loose_objects.NotPlain:
        pass
    try:
        git(repo, "update-ref", ref, new, old or "")
    except GitStoreError:
        return False
    return True


def keep(repo: str | Path, ref: str, oid: str) -> None:
    """Make `oid` reachable from `ref` (idempotent): content-addressed refs never change."""
    if resolve(repo, ref) == oid:
        return
    try:
        if loose_objects.update_ref(repo, ref, oid, None, check_old=False):
            return
    except loose_objects.NotPlain:
        pass
    git(repo, "update-ref", ref, oid)


class ObjectReader:
    """Reads objects one at a time through a single `git cat-file --batch` process."""

    def __init__(self, repo: str | Path) -> None:
        self.repo = str(repo)
        self._proc: subprocess.Popen | None = None

    def _process(self) -> subprocess.Popen:
        if self._proc is None:
            self._proc = subprocess.Popen(
                ["git", "-C", self.repo, "cat-file", "--batch"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            )
        return self._proc

    def read(self, spec: str) -> bytes | None:
        """The content of `spec` (an object id, or `<tree>:<path>`), None when it does not exist."""
        proc = self._process()
        stdin: IO[bytes] = proc.stdin  # type: ignore[assignment]
        stdout: IO[bytes] = proc.stdout  # type: ignore[assignment]
        try:
            stdin.write(spec.encode() + b"\n")
            stdin.flush()
            header = stdout.readline()
        except (BrokenPipeError, OSError) as err:
            raise GitStoreError(f"git cat-file in {self.repo}: {err}") from None
        if not header:
            raise GitStoreError(f"git cat-file in {self.repo}: exited (is it a repository?)")
        parts = header.split()
        if len(parts) != 3:  # "<spec> missing" or "ambiguous"
            return None
        size = int(parts[2])
        data = stdout.read(size)
        stdout.read(1)  # the newline after the content
        return data

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.stdin:
                self._proc.stdin.close()
            self._proc.wait()
            if self._proc.stdout:
                self._proc.stdout.close()
            self._proc = None


@contextmanager
def object_reader(repo: str | Path) -> Iterator[ObjectReader]:
    reader = ObjectReader(repo)
    try:
        yield reader
    finally:
        reader.close()
