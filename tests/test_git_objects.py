"""Objects and refs the stores write in process (libgit2) must be the ones git would write: same
ids, valid to `git fsck`, readable by git, and a ref compare-and-swap that loses to git's own lock.
A clone libgit2 does not read is refused in one line. Real git."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from taskfleet.core.git_objects import (
    GitStoreError,
    compare_and_swap,
    is_repository,
    keep,
    resolve,
    write_blob,
    write_commit,
    write_tree,
)
from tests.conftest import GitRemoteFixture, git


def git_bytes(repo: Path, *args: str, data: bytes | None = None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], input=data, capture_output=True,
                          check=True).stdout.decode().strip()


def test_objects_have_the_ids_git_gives_and_pass_fsck(tmp_path: Path):
    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    blob = write_blob(repo, b"line one\n\xff binary\n")
    assert blob == git_bytes(repo, "hash-object", "--stdin", data=b"line one\n\xff binary\n")
    other = write_blob(repo, b"")
    sub = write_tree(repo, [("x.jsonl", other)])
    # Names that sort differently as files and as folders ("a-b" vs "a/"), as git's order requires.
    tree = write_tree(repo, [("a-b", blob), ("board.json", other)], [("a", sub), ("pages", sub)])
    listing = (f"100644 blob {blob}\ta-b\n100644 blob {other}\tboard.json\n"
               f"040000 tree {sub}\ta\n040000 tree {sub}\tpages\n")
    assert tree == git_bytes(repo, "mktree", data=listing.encode())
    first = write_commit(repo, tree, None, "taskfleet outcomes 1\n\n2 outcome(s)")
    second = write_commit(repo, tree, first, "taskfleet outcomes 2")
    assert git_bytes(repo, "log", "--format=%s|%an|%ae", second).splitlines() == [
        "taskfleet outcomes 2|taskfleet|taskfleet@localhost",
        "taskfleet outcomes 1|taskfleet|taskfleet@localhost"]
    assert compare_and_swap(repo, "refs/taskfleet/runs/x/1", second, None)
    assert git_bytes(repo, "fsck", "--strict", "--no-dangling") == ""
    assert git_bytes(repo, "cat-file", "-p", f"{second}:a/x.jsonl") == ""


def test_ref_compare_and_swap_follows_git_locks_and_packed_refs(git_remote: GitRemoteFixture):
    repo = git_remote.clone
    base = git(repo, "rev-parse", "main")
    ref = "refs/taskfleet/runs/wf-1/run-1"
    assert resolve(repo, ref) is None
    assert compare_and_swap(repo, ref, base, None)
    assert not compare_and_swap(repo, ref, base, None)  # exists already
    child = write_commit(repo, write_tree(repo, []), base, "next")
    assert not compare_and_swap(repo, ref, child, "0" * 40)  # moved meanwhile
    git(repo, "pack-refs", "--all")  # now only in packed-refs
    assert resolve(repo, ref) == base
    lock = Path(repo) / ".git" / "refs" / "taskfleet" / "runs" / "wf-1" / "run-1.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")  # git is writing it right now
    assert not compare_and_swap(repo, ref, child, base)
    assert lock.exists()  # another writer's lock is never taken away
    lock.unlink()
    assert compare_and_swap(repo, ref, child, base)
    assert git(repo, "rev-parse", ref) == child
    keep(repo, "refs/taskfleet/boards/b", child)
    keep(repo, "refs/taskfleet/boards/b", child)
    assert git(repo, "rev-parse", "refs/taskfleet/boards/b") == child
    # git's own update-ref reads what was written in-process, and the other way round.
    git(repo, "update-ref", ref, base, child)
    assert resolve(repo, ref) == base


def test_a_sha256_clone_is_refused_in_one_line(tmp_path: Path):
    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", "--object-format=sha256", str(repo)], check=True)
    with pytest.raises(GitStoreError, match="SHA-256") as refused:
        write_blob(repo, b"x")
    assert "\n" not in str(refused.value)
    assert not is_repository(repo)


def test_objects_and_refs_survive_fsck_after_many_writes_and_a_pack(git_remote: GitRemoteFixture):
    """Interleaved writes of both stores' kinds, git's gc in between:
    still valid to fsck --strict."""
    repo = git_remote.clone
    tip = None
    for i in range(30):
        blob = write_blob(repo, f"outcome {i}\n".encode() * (i + 1))
        tree = write_tree(repo, [("outcomes.jsonl", blob)])
        commit = write_commit(repo, tree, tip, f"taskfleet outcomes {i}")
        assert compare_and_swap(repo, "refs/taskfleet/runs/r/1", commit, tip)
        tip = commit
        if i == 15:
            git(repo, "gc", "-q")
    assert resolve(repo, "refs/taskfleet/runs/r/1") == tip
    assert git(repo, "rev-list", "--count", tip) == "30"
    assert git_bytes(repo, "fsck", "--strict", "--no-dangling") == ""
