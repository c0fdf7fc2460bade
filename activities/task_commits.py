"""A command task's commit: its work as one commit on the task branch, carrying the task's trailers
(task id, run key) by which a retry finds the commit its run already made; a cached result's
commit made again on today's base carries the same."""

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
    """Whether HEAD is the branch and the branch is at `commit` (read from files)."""
    try:
        return (head_branch(worktree) == branch
                and resolve(str(worktree), branch, None, required=False) == commit)
    except (OSError, RefWriteRefused, OpFailed):
        return False


async def commit_work(
    worktree: Path, task_id: str, scope: str, branch: str, base_commit: str, run_key: str,
    heartbeat: Heartbeat = _nothing,
) -> str:
    """Commit what the executor staged onto the task branch (over its own commits that build on the
    base): `git commit` when HEAD is the branch at the base, else write-tree and commit-tree."""
    message = ("-m", _title(task_id, scope), "-m", _trailers(task_id, run_key))
    env = _commit_env(worktree)
    if on_branch_at(worktree, branch, base_commit):
        # The common case: one `git commit` writes tree, commit and branch; no hook runs (as with
        # commit-tree) and the message is kept verbatim.
        await git(worktree, "-c", "core.hooksPath=/dev/null", "commit", "-q", "--no-verify",
                  "--allow-empty", "--cleanup=verbatim", *message, env=env, heartbeat=heartbeat)
        return resolve(str(worktree), branch, None)
    tree = await git(worktree, "write-tree", heartbeat=heartbeat)
    head = (await git_run(worktree, "rev-parse", "--verify", "-q", "HEAD^{commit}")).out.strip()
    parent = base_commit
    if head and head != base_commit:
        if (await git_run(worktree, "merge-base", "--is-ancestor", base_commit, head)).code != 0:
            where = ((await git_run(worktree, "symbolic-ref", "-q", "--short", "HEAD")).out.strip()
                     or "a detached HEAD")
            raise CommitRefused(
                f"the executor left the worktree on {where} at {head[:12]}, which does not contain "
                f"the base {base_commit[:12]}; nothing was committed on {branch}")
        parent = head  # keep the executor's own commits
    commit = await git(worktree, "commit-tree", tree, "-p", parent, *message, env=env)
    await git(worktree, "update-ref", "-m", f"taskfleet: {task_id}", f"refs/heads/{branch}", commit)
    return commit


async def commit_from_cache(repo: str, cached_commit: str, worktree: Worktree, task_id: str,
                            run_key: str) -> str:
    """A cached result's commit made again on today's base (same tree: the cache is keyed by it); ""
    when unusable. Never pushed on the old base."""
    ran = await git_run(repo, "rev-parse", f"{cached_commit}^{{commit}}", f"{cached_commit}^",
                        f"{cached_commit}^{{tree}}")
    lines = ran.out.split()
    if ran.code != 0 or len(lines) != 3:
        return ""  # the commit is not in this clone: run the task after all
    commit, parent, tree = lines
    if parent != worktree.base_commit:
        message = (await git(repo, "log", "-1", "--format=%B", commit)).split(
            f"\n\n{TASK_TRAILER}:")[0]
        commit = await git(
            repo, "commit-tree", tree, "-p", worktree.base_commit, "-m", message or task_id,
            "-m", _trailers(task_id, run_key), env=_commit_env(repo),
        )
    # `reset --hard` points the task branch (checked out here) at the commit.
    return (commit if (await git_run(worktree.path, "reset", "-q", "--hard", commit)).code == 0
            else "")


class TreeIds:
    """Commit -> tree id per clone, asked of git once (a commit never changes its tree); bounded,
    oldest first out."""

    def __init__(self, entries: int = TREE_CACHE_ENTRIES) -> None:
        self.entries = entries
        self._trees: dict[tuple[str, str], str] = {}  # (clone, commit) -> tree

    async def tree_of(self, repo: str, commit: str) -> str:
        key = (os.path.abspath(repo), commit)
        tree = self._trees.get(key)
        if tree is None:
            tree = await git(repo, "rev-parse", f"{commit}^{{tree}}")
            if len(self._trees) >= self.entries:
                self._trees.pop(next(iter(self._trees)))
            self._trees[key] = tree
        return tree
