"""`Workspace`: where every step that runs a board's commands works, the same way for each (a task's
implementer and verify, a judge command, the merge queue's verify): a pooled worktree
(`checkout`), commands under one recorded token (`commands`), whose leftovers are always stopped."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, BinaryIO

from temporalio import activity
from temporalio.exceptions import ApplicationError

from taskfleet.activities.git.scratch import ScratchDirs
from taskfleet.activities.git.worktrees import Worktree, WorktreePool
from taskfleet.activities.processes.executor import CommandResult, run_command
from taskfleet.activities.processes.executor_policy import current_policy
from taskfleet.activities.processes.executor_records import (
    TOKEN_VARIABLE,
    ExecutorRecords,
    Stragglers,
    kill_task_processes,
    task_key,
)
from taskfleet.core.settings import TaskfleetSettings

Heartbeat = Callable[[], None]
# `run(command, cwd, env, log, timeout, label, **options)`: one command under the token.
RunCommand = Callable[..., Awaitable[CommandResult]]


def state_inside(state_dir: Path, repo: str) -> bool:
    """Whether the worker's state dir lies inside the clone's work tree."""
    state, root = Path(os.path.realpath(state_dir)), Path(os.path.realpath(repo))
    return state == root or root in state.parents


class Workspace:
    """The worker's worktree pool, scratch folders and records of running commands."""

    def __init__(self, settings: TaskfleetSettings) -> None:
        self.settings = settings
        self.worktrees = WorktreePool(settings.worktrees_dir, settings.pod_id)
        self.scratch = ScratchDirs(settings.scratch_dir)
        self.executors = ExecutorRecords(settings.state_dir / "executors")
        self.stragglers = Stragglers()

    def prune_stale(self) -> list[Path]:
        """At worker start: kill a crashed worker's commands, then remove its worktrees."""
        self.executors.reap_dead()
        return self.worktrees.prune_stale()

    async def stop(self) -> None:
        """At worker stop: drain the worktree pool (no worktree stays registered in any clone)."""
        await self.worktrees.drain()

    def refuse_state_dir_inside(self, what: str, repo: str) -> None:
        """Nothing runs when the worker's state dir (worktrees, logs) is inside the clone."""
        if state_inside(self.settings.state_dir, repo):
            raise ApplicationError(
                f"{what}: the worker's state dir {self.settings.state_dir} is inside the clone "
                f"{repo}; task worktrees and logs would land in the repository. Start the worker "
                f"with --state-dir (or TASKFLEET_STATE_DIR) outside {repo}",
                type="BadTaskSetup", non_retryable=True,
            )

    async def end_earlier_attempts(self, run_key: str, task_id: str) -> None:
        """A retry: first kill what an earlier attempt of this task still runs on this machine."""
        killing = asyncio.ensure_future(
            asyncio.to_thread(kill_task_processes, task_key(run_key, task_id)))
        while not (await asyncio.wait({killing}, timeout=1.0))[0]:
            activity.heartbeat(task_id)  # a kill may wait seconds for a process to go
        killed = killing.result()
        if killed:
            activity.logger.warning(
                "task %s: killed %d process(es) an earlier attempt left running", task_id, killed)

    @asynccontextmanager
    async def checkout(self, repo: str, branch: str | None, commit: str,
                       heartbeat: Heartbeat) -> AsyncIterator[Worktree]:
        """A pooled worktree at `commit`, on `branch` (None: detached), given back on every path."""
        worktree = await (self.worktrees.take(repo, branch, commit, heartbeat) if branch is not None
                          else self.worktrees.take_detached(repo, commit, heartbeat))
        try:
            yield worktree
        finally:
            self.worktrees.give_back(worktree)

    @asynccontextmanager
    async def commands(self, heartbeat: Heartbeat,
                       extra_env: dict[str, str] | None = None) -> AsyncIterator[RunCommand]:
        """A `run` for commands sharing a recorded token; what still carries it then is stopped."""
        token = self.executors.new_token()

        async def run(command: str, cwd: Path, env: dict[str, str], log: BinaryIO, timeout: float,
                      label: str, **options: Any) -> CommandResult:
            return await run_command(
                command, cwd, {**env, **(extra_env or {}), TOKEN_VARIABLE: token}, log,
                timeout, heartbeat, label,
                on_start=lambda pgid: self.executors.record(token, pgid), **options)
        try:
            yield run
        finally:
            await self.end_token(token)

    async def end_token(self, token: str) -> None:
        """Stop what carries a finished step's token, then journal it ended (a failed sweep leaves
        it for the reaper). In a PID namespace the kernel already killed it all: no sweep."""
        if current_policy().trees.namespaced:
            self.executors.forget(token)
            return
        try:
            await self.stragglers.stop(token)
        except Exception as err:  # noqa: BLE001 - the step's own result stands
            activity.logger.warning("could not stop what a command left running (token %s): %s",
                                    token, err)
            return
        self.executors.forget(token)
