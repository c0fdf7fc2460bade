"""Client side of the merge queue: its workflow id, and sending entries that start it when needed."""

from __future__ import annotations

import os
from typing import Any

from temporalio.client import Client, WithStartWorkflowOperation, WorkflowHandle

from taskfleet.core.ids import merge_queue_workflow_id as _pure_workflow_id
from taskfleet.core.merge_queue_start import entry_payload, with_queue_start_options
from taskfleet.core.models.merge_queue import MergeQueueConfig, MergeQueueStats, MergeQueueStatus, QueueEntry
from taskfleet.core.names import (
    DEFAULT_TASK_QUEUE,
    MERGE_QUEUE_WORKFLOW,
    QUERY_STATS,
    QUERY_STATUS,
    SIGNAL_ENQUEUE,
    SIGNAL_FLUSH,
    UPDATE_SUBMIT,
)

__all__ = ["MergeQueueClient", "merge_queue_workflow_id"]


def merge_queue_workflow_id(repo: str, remote: str, target: str, task_queue: str = DEFAULT_TASK_QUEUE) -> str:
    """The queue's workflow id for a clone (relative paths resolved here), remote, target and task queue."""
    return _pure_workflow_id(os.path.abspath(repo), remote, target, task_queue)


class MergeQueueClient:
    """Talks to the `MergeQueueWorkflow` of one (clone, remote, target), starting it lazily."""

    def __init__(self, client: Client, config: MergeQueueConfig, task_queue: str = DEFAULT_TASK_QUEUE):
        self.client = client
        self.config = config
        self.task_queue = task_queue
        self.workflow_id = merge_queue_workflow_id(config.repo, config.remote, config.target, task_queue)

    @property
    def handle(self) -> WorkflowHandle:
        return self.client.get_workflow_handle(self.workflow_id)

    async def enqueue(self, entry: QueueEntry | dict[str, Any]) -> None:
        """Signal-with-start: fire and forget; a bad entry shows up under `rejected` in `status`."""

        async def start(options: dict[str, Any]) -> Any:
            return await self.client.start_workflow(
                MERGE_QUEUE_WORKFLOW, self.config, start_signal=SIGNAL_ENQUEUE,
                start_signal_args=[entry_payload(entry)], **options,
            )

        await with_queue_start_options(start, self.config, self.task_queue)

    async def submit(self, entry: QueueEntry | dict[str, Any]) -> str:
        """Update-with-start: the accepted entry's id, or WorkflowUpdateFailedError with the reason."""

        async def start(options: dict[str, Any]) -> str:
            operation = WithStartWorkflowOperation(MERGE_QUEUE_WORKFLOW, self.config, **options)
            return await self.client.execute_update_with_start_workflow(
                UPDATE_SUBMIT, entry_payload(entry), start_workflow_operation=operation, result_type=str
            )

        return await with_queue_start_options(start, self.config, self.task_queue)

    async def flush(self) -> None:
        await self.handle.signal(SIGNAL_FLUSH)

    async def status(self) -> MergeQueueStatus:
        return await self.handle.query(QUERY_STATUS, result_type=MergeQueueStatus)

    async def stats(self) -> MergeQueueStats:
        return await self.handle.query(QUERY_STATS, result_type=MergeQueueStats)
