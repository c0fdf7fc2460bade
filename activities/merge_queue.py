"""The merge queue's activities: build a batch's merge chain, verify it once, push it by
compare-and-swap.

Verification runs in a slot of the task worktree pool (a clean checkout, detached at the merged
commit) through the executor, exactly as a task's commands run: own process group, the worker's
death signal, a token recorded in the executor journal and every straggler stopped when it ends.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from temporalio import activity

from taskfleet.activities.git.git_async import GitError
from taskfleet.activities.git.merge_chain import build_chain, cas_push
from taskfleet.activities.processes.executor import tail
from taskfleet.activities.processes.executor_records import no_detached_git_maintenance
from taskfleet.activities.task_runner import needs_a_person
from taskfleet.activities.workspace import Workspace
from taskfleet.core.ids import slug
from taskfleet.core.models.merge_queue import (
    BuildInput,
    BuildOutput,
    PushInput,
    PushOutput,
    VerifyInput,
    VerifyOutput,
)
from taskfleet.core.names import (
    ACTIVITY_QUEUE_BUILD,
    ACTIVITY_QUEUE_PUSH,
    ACTIVITY_QUEUE_VERIFY,
)

HEARTBEAT_EVERY = 1.0


async def _heartbeating(work: Any, detail: str) -> Any:
    """Run blocking git work in a thread, heartbeating meanwhile (a dead worker is noticed)."""
    job = asyncio.ensure_future(asyncio.to_thread(work))
    while True:
        done, _ = await asyncio.wait({job}, timeout=HEARTBEAT_EVERY)
        if done:
            return job.result()
        activity.heartbeat(detail)


def verify_env(params: VerifyInput, worktree: str) -> dict[str, str]:
    """The verify command's environment: the worker's, plus what it verifies (never in its command
    line)."""
    return {
        **os.environ,
        "TASKFLEET_QUEUE": params.queue_id,
        "TASKFLEET_QUEUE_TARGET": params.target,
        "TASKFLEET_QUEUE_BATCH": params.batch_id,
        "TASKFLEET_QUEUE_COMMIT": params.commit,
        "TASKFLEET_WORKTREE": worktree,
    }


class MergeQueueActivities:
    def __init__(self, settings: Any, workspace: Workspace) -> None:
        self.settings = settings
        self.workspace = workspace

    def activities(self) -> list[Any]:
        return [self.build, self.verify, self.push]

    @activity.defn(name=ACTIVITY_QUEUE_BUILD)
    async def build(self, params: BuildInput) -> BuildOutput:
        activity.logger.info("merging %d entries of %s onto %s", len(params.entries),
                             params.batch_id, params.target)
        return await _heartbeating(lambda: build_chain(params), params.batch_id)

    @activity.defn(name=ACTIVITY_QUEUE_VERIFY)
    async def verify(self, params: VerifyInput) -> VerifyOutput:
        """The verify command on the merged commit, once, in a pooled worktree."""
        space = self.workspace
        space.refuse_state_dir_inside(params.batch_id, params.repo)
        attempt = activity.info().attempt
        log_path = self.settings.logs_dir / "queue" / slug(
            params.queue_id, 120) / f"{slug(params.batch_id)}-{attempt}.log"
        await asyncio.to_thread(log_path.parent.mkdir, parents=True, exist_ok=True)
        heartbeat = lambda: activity.heartbeat(params.batch_id)  # noqa: E731
        await space.executors.reap_now_and_then()
        try:
            async with space.checkout(params.repo, None, params.commit, heartbeat) as worktree:
                env = verify_env(params, str(worktree.path))
                no_detached_git_maintenance(env)
                with await asyncio.to_thread(open, log_path, "a+b") as log:
                    async with space.commands(heartbeat) as run:
                        ran = await run(params.command, worktree.path, env, log,
                                        params.timeout_seconds, "verify")
                    output = tail(log)
        except GitError as err:
            person = needs_a_person(err)
            if person is None:
                raise
            raise person from None
        return VerifyOutput(passed=not ran.timed_out and ran.exit_code == 0,
                            exit_code=ran.exit_code, timed_out=ran.timed_out, seconds=ran.seconds,
                            output_tail=output, log_path=str(log_path))

    @activity.defn(name=ACTIVITY_QUEUE_PUSH)
    async def push(self, params: PushInput) -> PushOutput:
        retried = activity.info().attempt > 1
        return await _heartbeating(lambda: cas_push(params, retried), params.batch_id)
