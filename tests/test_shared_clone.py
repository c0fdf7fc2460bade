"""Git on a clone shared by pods: locked worktrees owned by a pod, pruning only one's own, and git's
lock files waited out. Real git throughout; "another pod's folder" is one we delete, as it is
invisible from here."""

from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from taskfleet.activities.git.git_async import GitError, _git_once
from taskfleet.activities.pods.shared_clone import (
    forget_worktree,
    git_retrying,
    is_lock_contention,
    owners,
    prune_own,
    registrations,
    worktree_add_args,
)
from tests.conftest import GitRemoteFixture, git


def add(fx: GitRemoteFixture, pod: str, name: str) -> Path:
    path = fx.clone.parent / pod / name
    git(fx.clone, "worktree", "add", "-q", *worktree_add_args(pod), "--detach", str(path), "main")
    return path


def registered(fx: GitRemoteFixture) -> set[str]:
    out = git(fx.clone, "worktree", "list", "--porcelain")
    return {line.split(" ", 1)[1] for line in out.splitlines()
            if line.startswith("worktree ")} - {str(fx.clone)}


def test_prune_and_gc_leave_other_pods_worktrees_and_prune_own_takes_only_ours(
        git_remote: GitRemoteFixture):
    fx = git_remote
    mine = [add(fx, "pod-a", f"w-pod-a-{i}") for i in range(2)]
    theirs = add(fx, "pod-b", "w-pod-b-0")
    shutil.rmtree(theirs)  # pod-b's folder is in pod-b's private state dir: not visible here
    git(fx.clone, "worktree", "prune")  # what gc runs: locked registrations survive
    assert registered(fx) == {str(p) for p in mine + [theirs]}
    assert owners(fx.clone) == {"pod-a", "pod-b"}
    assert {r.owner for r in registrations(fx.clone)} == {"pod-a", "pod-b"}

    assert not forget_worktree(fx.clone, theirs, "pod-a")  # never another pod's
    assert forget_worktree(fx.clone, mine[0], "pod-a")
    assert registered(fx) == {str(mine[1]), str(theirs)}
    assert prune_own(fx.clone, "pod-a") == [mine[1]]
    assert not mine[1].exists()
    assert registered(fx) == {str(theirs)}
    # pod-b's expired lease holder cleans up after it, without touching folders it cannot see
    assert prune_own(fx.clone, "pod-b", delete_folders=False) == [theirs]
    assert registered(fx) == set()
    assert subprocess.run(["git", "fsck", "--no-progress"], cwd=fx.clone,
                          capture_output=True).returncode == 0


@pytest.mark.parametrize(
    "lock_file, command",
    [
        ("config.lock", ("config", "taskfleet.test", "1")),
        ("packed-refs.lock", ("pack-refs", "--all")),
        ("refs/heads/side.lock", ("branch", "-f", "side", "main")),
    ],
)
def test_git_lock_files_held_by_another_process_are_waited_out(
        git_remote: GitRemoteFixture, lock_file: str, command):
    fx = git_remote
    lock = fx.clone / ".git" / lock_file
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    held = subprocess.run(["git", *command], cwd=fx.clone, capture_output=True, text=True)
    assert held.returncode != 0 and is_lock_contention(held.stderr), held.stderr
    gone = threading.Event()

    def let_go() -> None:
        gone.wait(0.3)
        lock.unlink()

    releaser = threading.Thread(target=let_go)
    releaser.start()
    try:
        git_retrying(fx.clone, *command, total_seconds=30)
    finally:
        gone.set()
        releaser.join()
    assert not lock.exists()


def test_other_git_failures_are_not_retried(git_remote: GitRemoteFixture):
    with pytest.raises(subprocess.CalledProcessError) as caught:
        git_retrying(git_remote.clone, "checkout", "no-such-branch", total_seconds=30)
    assert not is_lock_contention(caught.value.stderr)


def test_a_worktree_half_registered_by_another_pod_is_waited_out(git_remote: GitRemoteFixture):
    fx = git_remote
    half = fx.clone / ".git" / "worktrees" / "w-other-pod-1"
    half.mkdir(parents=True)  # another pod's `git worktree add`, caught before it wrote commondir
    (half / "gitdir").write_text(str(fx.clone.parent / "elsewhere" / ".git") + "\n")
    (half / "commondir").write_text("")
    args = ("worktree", "add", "-q", "--detach", str(fx.clone.parent / "mine"), "main")
    ran = subprocess.run(["git", *args], cwd=fx.clone, capture_output=True, text=True)
    assert ran.returncode != 0 and is_lock_contention(ran.stderr), ran.stderr
    finished = threading.Event()

    def finish() -> None:  # the other pod's add completes
        finished.wait(0.3)
        (half / "commondir").write_text("../..\n")

    other = threading.Thread(target=finish)
    other.start()
    try:
        git_retrying(fx.clone, *args, total_seconds=30)
    finally:
        finished.set()
        other.join()
    assert (fx.clone.parent / "mine").is_dir()


def test_forget_registrations_drops_only_the_given_paths_this_pod_owns(
        git_remote: GitRemoteFixture):
    from taskfleet.activities.pods.shared_clone import forget_registrations

    fx = git_remote
    mine = [add(fx, "pod-a", f"w-pod-a-{i}") for i in range(3)]
    theirs = add(fx, "pod-b", "w-pod-b-0")
    assert forget_registrations(fx.clone, [mine[0], mine[1], theirs], "pod-a") == [mine[0], mine[1]]
    assert registered(fx) == {str(mine[2]), str(theirs)}
    assert mine[0].exists()  # folders are the caller's to delete


async def test_a_git_failure_on_a_lock_file_names_the_file_not_git_s_advice(
        git_remote: GitRemoteFixture):
    """git ends a lock failure with advice ("remove the file manually to continue."); the error a
    task reports names the lock file instead, so a person knows which file to look at."""
    lock = git_remote.clone / ".git" / "refs" / "heads" / "side.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    ran = await _git_once(git_remote.clone, "update-ref", "refs/heads/side", "main")
    assert ran.code != 0 and is_lock_contention(ran.err)
    message = str(GitError(("update-ref", "refs/heads/side"), ran.code, ran.err))
    assert str(lock) in message and "manually" not in message, message


def test_a_file_named_like_a_lock_is_not_mistaken_for_the_lock():
    err = ("error: Your local changes to the following files would be overwritten by checkout:\n"
           "\tCargo.lock\nPlease commit your changes or stash them before you switch branches.\n"
           "Aborting\n")
    assert str(GitError(("checkout", "-q"), 1, err)) == "git checkout -q failed: Aborting"
