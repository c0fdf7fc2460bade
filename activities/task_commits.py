"""A command task's commit: its work as one commit on the task branch, carrying the task's trailers.

The trailers (task id, run key) are how a retry finds the commit its run already made, so every
way a task's commit is made here writes the same message: committed after a run, or a cached
result's commit made again on today's base.
"""

from __future__ import annotations

import os
from pathlib import Path

from git import Repo
from taskfleet.activities.git.git_async import Heartbeat, _nothing, git, git_run
from taskfleet.activities.git.git_op_application import OpFailed, commit_env
from taskfleet.activities.git.work_commit import CommitRefused
from taskfleet.activities.git.worktree_refs import RefWriteRefused, head_branch
from taskfleet.activities.git.worktrees import RUN_TRAILER, TASK_TRAILER, Worktree, resolve

TREE_CACHE_ENTRIES = 4096


def task_message(task_id: str, scope: str, run_key: str) -> str:
    """A task commit's message, as `commit_work` writes it with git: title, then the trailers."""
    return f"{_title(task_id, scope)}\n\n{_trailers(task_id, run_key)}\n"


def _title(task_id: str, scope: str) -> str:
    return (f"{task_id}: {scope}" if scope else task_id)[:200]


def _trailers(task_id: str, run_key: str) -> str:
    return f"{TASK_TRAILER}: {task_id}\n{RUN_TRAILER}: {run_key}"


def _commit_env(path: str | Path) -> dict[str, str]:
    """The author and committer git is given for a task commit in the clone at `path`."""
    repo = Repo(path)
    try:
        return commit_env(repo)
    finally:
        repo.close()


def on_branch_at(worktree: Path, branch: str, commit: str) -> bool:
    """Whether the worktree's HEAD is the branch and the branch is at `commit` (read from files)."""
    try:
        return head_branch(worktree) == branch and resolve(str(worktree), branch, None, required=False) == commit
    except (OSError, RefWriteRefused, OpFailed):
        return False


async def commit_work(
    worktree: Path, task_id: str, scope: str, branch: str, base_commit: str, run_key: str,
    heartbeat: Heartbeat = _nothing,
) -> str:
    """Commit what the executor staged onto the task's branch, wherever the executor left HEAD.

    Executors (agents) may commit, switch or create branches: the task's work is the worktree's
    content, on top of the executor's own commits when they build on the base. When HEAD is still
    the task branch at the base, `git commit` makes it in one process; otherwise the commit is made
    with plumbing (write-tree, commit-tree) and the task branch set to it. Either way the branch
    that is pushed carries the task's work.
    """
    message = ("-m", _title(task_id, scope), "-m", _trailers(task_id, run_key))
    env = _commit_env(worktree)
    if on_branch_at(worktree, branch, base_commit):
        # The common case (the executor left HEAD on the task branch at the base): one `git commit`
        # writes the tree, the commit and the branch. No hook runs (as with commit-tree) and the
        # message is kept verbatim.
        await git(worktree, "-c", "core.hooksPath=/dev/null", "commit", "-q", "--no-verify", "--allow-empty",
                  "--cleanup=verbatim", *message, env=env, heartbeat=heartbeat)
        return resolve(str(worktree), branch, None)
    tree = await git(worktree, "write-tree", heartbeat=heartbeat)
    head = (await git_run(worktree, "rev-parse", "--verify", "-q", "HEAD^{commit}")).out.strip()
    parent = base_commit
    if head and head != base_commit:
        if (await git_run(worktree, "merge-base", "--is-ancestor", base_commit, head)).code != 0:
            where = (await git_run(worktree, "symbolic-ref", "-q", "--short", "HEAD")).out.strip() or "a detached HEAD"
            raise CommitRefused(
                f"the executor left the worktree on {where} at {head[:12]}, which does not contain the base "
                f"{base_commit[:12]}; nothing was committed on {branch}"
            )
        parent = head  # keep the executor's own commits
    commit = await git(worktree, "commit-tree", tree, "-p", parent, *message, env=env)
    await git(worktree, "update-ref", "-m", f"taskfleet: {task_id}", f"refs/heads/{branch}", commit)
    return commit


async def commit_from_cache(repo: str, cached_commit: str, worktree: Worktree, task_id: str, run_key: str) -> str:
    """A cached result's commit on the task branch, on today's base; "" when unusable.

    The cache is keyed by the base's tree, so a commit made on an older base commit with the same
    tree is the same work: it is committed again on the current base (same tree, this run's
    trailers), never pushed on the old one.
    """
    ran = await git_run(repo, "rev-parse", f"{cached_commit}^{{commit}}", f"{cached_commit}^",
                        f"{cached_commit}^{{tree}}")
    lines = ran.out.split()
    if ran.code != 0 or len(lines) != 3:
        return ""  # the commit is not in this clone: run the task after all
    commit, parent, tree = lines
    if parent != worktree.base_commit:
        message = (await git(repo, "log", "-1", "--format=%B", commit)).split(f"\n\n{TASK_TRAILER}:")[0]
        commit = await git(
            repo, "commit-tree", tree, "-p", worktree.base_commit, "-m", message or task_id,
            "-m", _trailers(task_id, run_key), env=_commit_env(repo),
        )
    # Point the task branch (checked out in the worktree) at the commit.
    return commit if (await git_run(worktree.path, "reset", "-q", "--hard", commit)).code == 0 else ""


class TreeIds:
    """Commit -> tree id, per clone. A commit never changes its tree, so each is asked of git once
    (a bounded memory: the oldest entry goes first)."""

    def __init__(self, entries: int = TREE_CACHE_ENTRIES) -> None:
        self.entries = entries
        self._trees: dict[tuple[str, str], str] = {}  # (clone, commit) -> its tree

    async def tree_of(self, repo: str, commit: str) -> str:
        key = (os.path.abspath(repo), commit)
        tree = self._trees.get(key)
        if tree is None:
            tree = await git(repo, "rev-parse", f"{commit}^{{tree}}")
            if len(self._trees) >= self.entries:
                self._trees.pop(next(iter(self._trees)))
            self._trees[key] = tree
        return tree
