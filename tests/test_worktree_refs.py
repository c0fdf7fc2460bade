"""Ref files written in-process for a worktree slot: git must read them exactly as if it had
written them, and anything unusual is refused (the caller then runs git). Real git throughout."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskfleet.activities.git.worktree_refs import (
    RefWriteRefused,
    detach_head,
    head_branch,
    point_branch,
)
from tests.conftest import GitRemoteFixture, git


def slot(fx: GitRemoteFixture, name: str = "w-test") -> Path:
    path = fx.clone.parent / "slots" / name
    git(fx.clone, "worktree", "add", "-q", "--detach", str(path), "main")
    return path


def test_point_branch_is_what_update_ref_and_symbolic_ref_would_leave(git_remote: GitRemoteFixture):
    fx = git_remote
    path = slot(fx)
    base = git(fx.clone, "rev-parse", "main")
    point_branch(path, "task/T2.1", base)
    assert git(path, "symbolic-ref", "HEAD") == "refs/heads/task/T2.1"
    assert git(fx.clone, "rev-parse", "refs/heads/task/T2.1") == base
    assert git(path, "status", "--porcelain") == ""
    assert head_branch(path) == "task/T2.1"
    # git itself moves the branch on from there (a commit in the worktree), and sees no stale lock.
    (path / "new.txt").write_text("x\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "work")
    assert git(fx.clone, "rev-parse", "task/T2.1^") == base
    # Pointing it again (the next task on the same branch) overwrites the loose ref, also when
    # packed.
    git(fx.clone, "pack-refs", "--all")
    point_branch(path, "task/T2.1", base)
    assert git(fx.clone, "rev-parse", "task/T2.1") == base
    detach_head(path, base)
    assert head_branch(path) == "" and git(path, "rev-parse", "HEAD") == base
    assert git(fx.clone, "fsck", "--no-progress") == ""


def test_unusual_refs_are_refused_so_git_decides(git_remote: GitRemoteFixture):
    fx = git_remote
    path = slot(fx)
    base = git(fx.clone, "rev-parse", "main")
    git(fx.clone, "branch", "task", base)  # a branch named like the folder `task/x` needs
    with pytest.raises(RefWriteRefused, match="is a ref"):
        point_branch(path, "task/x", base)
    git(fx.clone, "branch", "deep/er/x", base)
    with pytest.raises(RefWriteRefused, match="folder of refs"):
        point_branch(path, "deep/er", base)
    lock = fx.clone / ".git" / "refs" / "heads" / "held.lock"
    lock.write_text("")  # another git process is writing `held`
    with pytest.raises(RefWriteRefused, match="another git process"):
        point_branch(path, "held", base)
    with pytest.raises(RefWriteRefused, match="not a plain branch"):
        point_branch(path, "bad..name", base)
    with pytest.raises(RefWriteRefused, match="not a worktree link"):
        point_branch(fx.clone, "ok", base)  # the main checkout's .git is a folder
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD") == "HEAD"  # nothing moved


def test_a_name_that_clashes_with_a_packed_branch_is_refused_as_git_refuses_it(
        git_remote: GitRemoteFixture):
    """`task` against a packed `task/a` (or the reverse): git refuses the pair, and a clone holding
    both can be neither cloned nor pushed whole; the in-process write must refuse it too."""
    fx = git_remote
    path = slot(fx)
    base = git(fx.clone, "rev-parse", "main")
    git(fx.clone, "branch", "task/a", base)
    git(fx.clone, "branch", "solo", base)
    git(fx.clone, "pack-refs", "--all")  # as gc leaves them: no loose file, no folder
    with pytest.raises(RefWriteRefused, match="packed"):
        point_branch(path, "task", base)
    with pytest.raises(RefWriteRefused, match="packed"):
        point_branch(path, "solo/b", base)
    refs = git(fx.clone, "for-each-ref", "--format=%(refname)", "refs/heads/").split()
    assert "refs/heads/task" not in refs and "refs/heads/solo/b" not in refs


def test_a_branch_checked_out_by_a_person_is_found_but_a_slot_s_is_not(
        git_remote: GitRemoteFixture):
    from taskfleet.activities.git.worktree_refs import checked_out_elsewhere

    fx = git_remote
    path = slot(fx)
    base = git(fx.clone, "rev-parse", "main")
    git(fx.clone, "checkout", "-q", "-b", "task/mine")  # the user looks at a task's branch
    assert checked_out_elsewhere(path, "task/mine") == str(fx.clone)
    other = fx.clone.parent / "slots" / "theirs"
    git(fx.clone, "worktree", "add", "-q", "-b", "task/person", str(other), base)
    assert checked_out_elsewhere(path, "task/person") == str(other)
    # another pod's slot, between a task and its scrub
    pod_slot = fx.clone.parent / "slots" / "w-pod"
    git(fx.clone, "worktree", "add", "-q", "--lock", "--reason", "taskfleet pod=p1", "-b",
        "task/slot", str(pod_slot), base)
    assert checked_out_elsewhere(path, "task/slot") == ""
    assert checked_out_elsewhere(path, "task/nobody") == ""
