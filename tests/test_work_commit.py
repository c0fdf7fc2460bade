"""A task's commit from the paths its command touched (slot watch + libgit2), and the scrub that
puts back only those paths: the same tree `git add -A` gives, verification's leftovers never in
it, a slot left as clean as a full scrub leaves it, objects `git fsck` accepts. Real git, real
inotify, real files."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from taskfleet.activities.git.slot_watch import SlotWatch
from taskfleet.activities.git.work_commit import CommitRefused, commit_tree
from taskfleet.activities.git.worktrees import WorktreePool
from tests.conftest import GitRemoteFixture, eventually, git

MESSAGE = "T1: work\n\nTaskfleet-Task: T1\nTaskfleet-Run: r1\n"


def sh(cwd: Path, script: str) -> None:
    subprocess.run(["sh", "-ec", script], cwd=cwd, check=True)


def tree_git_would_stage(worktree: Path, base: str, tmp: Path) -> str:
    """`git add -A` over a private index (the slot's own index stays untouched)."""
    env = {**os.environ, "GIT_INDEX_FILE": str(tmp / "expected-index")}
    subprocess.run(["git", "read-tree", base], cwd=worktree, env=env, check=True)
    subprocess.run(["git", "add", "-A"], cwd=worktree, env=env, check=True)
    return subprocess.run(["git", "write-tree"], cwd=worktree, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def seed(fx: GitRemoteFixture) -> str:
    clone = fx.clone
    sh(clone, """
        mkdir -p lib/deep bin gone
        echo a > lib/a.py; echo b > lib/deep/b.py; echo run > bin/tool; echo x > gone/x; echo y > gone/y
        printf '__pycache__/\\n*.log\\n' > .gitignore
        ln -s lib/a.py link
    """)  # noqa: E501 (a script's text)
    git(clone, "add", "-A")
    git(clone, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "layout")
    return git(clone, "rev-parse", "HEAD")


async def drained(pool: WorktreePool) -> None:
    async def done():
        assert not pool._cleanups
    await eventually(done, timeout=30)


async def test_the_commit_is_what_git_add_would_stage_and_the_scrub_restores_only_those_paths(
        git_remote: GitRemoteFixture, tmp_path: Path):
    base = seed(git_remote)
    pool = WorktreePool(tmp_path / "slots", "p1")
    worktree = await pool.take(str(git_remote.clone), "task/T1", base)
    assert worktree.slot.watch is not None
    # The implementer: an edit, a deletion, a folder deleted, an exec bit, a symlink retargeted,
    # files in new folders, an ignored new file, a file replaced by a folder.
    sh(worktree.path, """
        echo changed >> lib/a.py
        rm lib/deep/b.py
        rm -r gone
        chmod +x bin/tool
        ln -sfn lib/deep link
        mkdir -p new/sub; echo n > new/sub/n.txt; echo m > new/m.txt
        echo noise > run.log
        rm README.md; mkdir README.md; echo inner > README.md/inner.txt
    """)
    expected = tree_git_would_stage(worktree.path, base, tmp_path)
    assert await pool.snapshot(worktree)
    assert worktree.tree == expected
    # Verification leaves bytecode behind and even edits a tracked file: none of it is committed.
    sh(worktree.path,
       "mkdir -p lib/__pycache__; echo pyc > lib/__pycache__/a.pyc; echo verify >> shared.txt")
    commit = commit_tree(worktree.path, "task/T1", base, worktree.tree, MESSAGE)
    assert git(git_remote.clone, "rev-parse", "task/T1") == commit
    assert git(git_remote.clone, "rev-parse", f"{commit}^") == base
    assert git(git_remote.clone, "log", "-1", "--format=%B", commit) == MESSAGE.strip()
    assert git(git_remote.clone, "show", f"{commit}:shared.txt") == "line 1\nline 2\nline 3"
    listing = git(git_remote.clone, "ls-tree", "-r", commit)
    assert "100755 blob" in next(line for line in listing.splitlines() if line.endswith("bin/tool"))
    assert "120000 blob" in next(line for line in listing.splitlines() if line.endswith("\tlink"))
    assert "new/sub/n.txt" in listing and "README.md/inner.txt" in listing
    assert "run.log" not in listing and "gone/" not in listing and "b.py" not in listing
    assert git(git_remote.clone, "fsck", "--strict", "--no-dangling", "--no-progress") == ""

    index_before = (Path(git(worktree.path, "rev-parse", "--git-dir")) / "index").stat().st_mtime_ns
    pool.give_back(worktree)
    await drained(pool)
    slot = worktree.slot
    # Put back by paths: the index was never rewritten, and the slot is exactly the base again.
    assert ((Path(git(slot.path, "rev-parse", "--git-dir")) / "index").stat().st_mtime_ns
            == index_before)
    assert git(slot.path, "status", "--porcelain", "--ignored", "--untracked-files=all") == ""
    assert git(slot.path, "rev-parse", "HEAD") == base
    assert os.readlink(slot.path / "link") == "lib/a.py"
    assert not os.access(slot.path / "bin" / "tool", os.X_OK)
    # The next task on the same base takes that slot as it is.
    again = await pool.take(str(git_remote.clone), "task/T2", base)
    assert again.slot is slot
    pool.give_back(again)
    await pool.drain()


async def test_the_executor_s_own_commits_are_kept_and_a_head_without_the_base_is_refused(
        git_remote: GitRemoteFixture, tmp_path: Path):
    base = git(git_remote.clone, "rev-parse", "main")
    pool = WorktreePool(tmp_path / "slots", "p1")
    worktree = await pool.take(str(git_remote.clone), "task/T1", base)
    sh(worktree.path, """
        echo own > own.txt; git add own.txt; git -c user.name=a -c user.email=a@a commit -qm own
        echo after > after.txt
    """)
    own = git(worktree.path, "rev-parse", "HEAD")
    assert await pool.snapshot(worktree)
    commit = commit_tree(worktree.path, "task/T1", base, worktree.tree, MESSAGE)
    assert git(git_remote.clone, "rev-parse", f"{commit}^") == own
    assert set(git(git_remote.clone, "ls-tree", "--name-only", commit).split()) >= {
        "own.txt", "after.txt"}
    pool.give_back(worktree)  # the executor wrote the index: a full scrub
    await drained(pool)
    assert git(worktree.slot.path, "status", "--porcelain", "--ignored") == ""

    worktree = await pool.take(str(git_remote.clone), "task/T3", base)
    sh(worktree.path, "git checkout -q --orphan elsewhere; git rm -rq --cached .; echo z > z.txt")
    assert await pool.snapshot(worktree)
    git(worktree.path, "-c", "user.name=a", "-c", "user.email=a@a", "commit", "-qm", "unrelated",
        "--allow-empty")
    with pytest.raises(CommitRefused, match="does not contain the base"):
        commit_tree(worktree.path, "task/T3", base, worktree.tree, MESSAGE)
    assert git(git_remote.clone, "rev-parse", "task/T3") == base
    pool.give_back(worktree)
    await pool.drain()


async def test_without_the_watch_git_stages_as_before(git_remote: GitRemoteFixture, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TASKFLEET_SLOT_WATCH", "0")
    base = git(git_remote.clone, "rev-parse", "main")
    pool = WorktreePool(tmp_path / "slots", "p1")
    worktree = await pool.take(str(git_remote.clone), "task/T1", base)
    assert worktree.slot.watch is None
    (worktree.path / "x.txt").write_text("x\n")
    assert not await pool.snapshot(worktree)  # unknown: the caller runs `git add -A`
    pool.give_back(worktree)
    await drained(pool)
    assert git(worktree.slot.path, "status", "--porcelain", "--ignored") == ""
    await pool.drain()


def test_a_renamed_folder_makes_the_changes_unknown(tmp_path: Path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    watch = SlotWatch(tmp_path)
    try:
        (tmp_path / "a" / "b" / "f").write_text("1")
        assert watch.take() == {"a/b/f"}
        (tmp_path / "a" / "b").rename(tmp_path / "c")
        assert watch.take() is None  # its watch would name the wrong folder: the caller scans
        (tmp_path / "fresh").mkdir()
        (tmp_path / "fresh" / "g").write_text("2")
        assert watch.take() == {"fresh", "fresh/g"}
    finally:
        watch.close()


WRITER = r"""
import sys
from pathlib import Path
from taskfleet.activities.git.work_commit import commit_tree, snapshot
worktree, base = Path(sys.argv[1]), sys.argv[2]
i = 0
while True:
    i += 1
    (worktree / "churn").mkdir(exist_ok=True)
    (worktree / "churn" / f"f{i % 50}.txt").write_text(f"{i}\n" * 2000)
    tree = snapshot(worktree, base, ["churn"])
    commit_tree(worktree, "task/kill", base, tree, f"commit {i}\n")
    print(i, flush=True)
"""


async def test_kill_9_in_the_middle_of_commits_leaves_a_repository_fsck_accepts(
        git_remote: GitRemoteFixture, tmp_path: Path):
    base = git(git_remote.clone, "rev-parse", "main")
    pool = WorktreePool(tmp_path / "slots", "p1")
    worktree = await pool.take(str(git_remote.clone), "task/kill", base)
    import sys

    from tests.conftest import ROOT
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(worktree.path), base], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(20):  # a few commits made: it is in the middle of writing objects and refs
            assert writer.stdout.readline(), "the writer stopped"
    finally:
        writer.kill()
        writer.wait()
        writer.stdout.close()
    done = subprocess.run(["git", "fsck", "--strict", "--no-progress"], cwd=git_remote.clone,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "error" not in done.stderr and "missing" not in done.stdout
    tip = git(git_remote.clone, "rev-parse", "task/kill")  # the branch names a whole commit
    assert git(git_remote.clone, "cat-file", "-t", tip) == "commit"
    await pool.drain()
