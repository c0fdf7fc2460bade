"""What the orchestrator asks a worker before a run's tasks start: that the task branches are the
run's own on the clone, that this worker gives tasks the variables the board asks for, and the
remote's default branch for a board that names no base. A refusal is non-retryable: it is about the
board, not a passing fault of the worker."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from taskfleet.activities.git.branch_claims import BranchClaims, BranchesHeld, NotAClone
from taskfleet.activities.pods.fence import Fence
from taskfleet.activities.pods.lease import LeaseLock, NoWorker
from taskfleet.activities.processes.executor_policy import task_env_problem
from taskfleet.core.default_branch import default_branch
from taskfleet.core.models.merge_queue import DefaultBranchInput
from taskfleet.core.models.orchestrator import BranchClaim, TaskEnvCheck
from taskfleet.core.names import (
    ACTIVITY_CHECK_TASK_ENV,
    ACTIVITY_CLAIM_BRANCHES,
    ACTIVITY_DEFAULT_BRANCH,
)
from taskfleet.core.settings import TaskfleetSettings


def clone_lease(coordination_queue: str):
    """The lease on a clone's claims folder, shared by every pod (one lock per clone, on the
    coordination queue), fenced; given back by signal, so the claim need not wait."""

    def hold(folder: Path):
        lock = LeaseLock.for_activity(f"branch-claims:{folder}", lease_seconds=30,
                                      task_queue=coordination_queue)
        return lock.hold(fence=Fence(folder / ".fence"), wait_release=False)

    return hold


class RunCheckActivities:
    def __init__(self, settings: TaskfleetSettings) -> None:
        self.settings = settings
        self.claims = BranchClaims()

    @activity.defn(name=ACTIVITY_CLAIM_BRANCHES)
    async def claim_branches(self, claim: BranchClaim) -> int:
        """Refuse a run whose task branches another running run holds on this clone."""
        client = activity.client()

        async def is_running(workflow_id: str, first_run_id: str) -> bool:
            try:
                described = await client.get_workflow_handle(workflow_id).describe()
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return False
                raise
            info = described.raw_description.workflow_execution_info
            return (described.status == WorkflowExecutionStatus.RUNNING
                    and info.first_run_id == first_run_id)

        lease = clone_lease(self.settings.coordination_task_queue)
        try:
            return await self.claims.claim(claim, is_running,
                                           lambda: activity.heartbeat("claiming"), lease)
        except (BranchesHeld, NotAClone) as err:
            raise ApplicationError(str(err), type="BranchesHeld", non_retryable=True) from None
        except NoWorker as err:
            raise ApplicationError(str(err), type="NoWorker", non_retryable=True) from None

    @activity.defn(name=ACTIVITY_CHECK_TASK_ENV)
    async def check_task_env(self, check: TaskEnvCheck) -> None:
        """Refuse a board that asks for worker variables this worker does not give tasks."""
        problem = task_env_problem(list(check.names)[:1000])
        if problem:
            raise ApplicationError(problem, type="EnvNotAllowed", non_retryable=True)

    @activity.defn(name=ACTIVITY_DEFAULT_BRANCH)
    async def default_branch(self, params: DefaultBranchInput) -> str:
        """The remote's default branch, for a board started without `base`."""
        if not os.path.isdir(params.repo):
            raise ApplicationError(f"repo {params.repo} is not a folder on this worker",
                                   type="BadTaskSetup", non_retryable=True)
        started = time.monotonic()
        name = await asyncio.to_thread(default_branch, params.repo, params.remote)
        if not name:
            raise ApplicationError(f"cannot tell the default branch of {params.remote} from "
                                   f"{params.repo}; set `base` on the board", type="BadTaskSetup",
                                   non_retryable=True)
        activity.logger.info("default branch of %s: %s (%.3fs)", params.remote, name,
                             time.monotonic() - started)
        return name
