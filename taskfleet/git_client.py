"""Client side of the git batcher: its workflow id, and sending ops that start it when needed."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowHandle,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy

from taskfleet.models import (
    DEFAULT_TASK_QUEUE,
    GIT_BATCH_WORKFLOW,
    BatchResult,
    GitBatchConfig,
    GitBatchStats,
    GitBatchStatus,
    GitOp,
)
from taskfleet.naming import git_batch_workflow_id as _pure_workflow_id
from taskfleet.search_attributes import TASKFLEET_KIND, TASKFLEET_REPO


def git_batch_workflow_id(repo: str, remote: str = "origin") -> str:
    """The batcher's workflow id for a clone (relative paths resolved here) and remote."""
    return _pure_workflow_id(os.path.abspath(repo), remote)


def _start_options(config: GitBatchConfig, task_queue: str) -> dict[str, Any]:
    return dict(
        id=git_batch_workflow_id(config.repo, config.remote),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=f"git batcher: {config.repo} -> {config.remote}",
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(TASKFLEET_KIND, "git-batch"),
                SearchAttributePair(TASKFLEET_REPO, os.path.abspath(config.repo)),
            ]
        ),
    )


def op_payload(op: GitOp | dict[str, Any]) -> dict[str, Any]:
    """An op as the JSON object sent on the wire: empty fields left out, `enqueued_at` never sent."""
    if isinstance(op, GitOp):
        data = asdict(op)
        data.pop("enqueued_at", None)
        return {k: v for k, v in data.items() if v not in ("", [], None)}
    return op


class GitBatcherClient:
    """Talks to the `GitBatchWorkflow` of one (clone, remote), starting it lazily."""

    def __init__(self, client: Client, config: GitBatchConfig, task_queue: str = DEFAULT_TASK_QUEUE):
        self.client = client
        self.config = config
        self.task_queue = task_queue
        self.workflow_id = git_batch_workflow_id(config.repo, config.remote)

    @property
    def handle(self) -> WorkflowHandle:
        return self.client.get_workflow_handle(self.workflow_id)

    async def enqueue(self, op: GitOp | dict[str, Any]) -> None:
        """Signal-with-start: fire and forget; a bad op shows up under `rejected` in `status`."""
        await self.client.start_workflow(
            GIT_BATCH_WORKFLOW,
            self.config,
            start_signal="enqueue",
            start_signal_args=[op_payload(op)],
            **_start_options(self.config, self.task_queue),
        )

    async def submit(self, op: GitOp | dict[str, Any]) -> str:
        """Update-with-start: returns the accepted op id, or raises with the reason it was refused."""
        start = WithStartWorkflowOperation(
            GIT_BATCH_WORKFLOW, self.config, **_start_options(self.config, self.task_queue)
        )
        return await self.client.execute_update_with_start_workflow(
            "submit", op_payload(op), start_workflow_operation=start, result_type=str
        )

    async def flush(self) -> None:
        await self.handle.signal("flush")

    async def flush_now(self) -> BatchResult:
        return await self.handle.execute_update("flush_now", result_type=BatchResult)

    async def retry(self, batch_id: str) -> BatchResult:
        return await self.handle.execute_update("retry", batch_id, result_type=BatchResult)

    async def status(self) -> GitBatchStatus:
        return await self.handle.query("status", result_type=GitBatchStatus)

    async def stats(self) -> GitBatchStats:
        return await self.handle.query("stats", result_type=GitBatchStats)
