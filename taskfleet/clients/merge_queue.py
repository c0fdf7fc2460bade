"""Client side of the merge queue: its workflow id, and entries that start it when needed."""

from __future__ import annotations

import os
from typing import Any

from temporalio.client import Client

from taskfleet.clients.long_lived import LongLivedClient
from taskfleet.core.ids import merge_queue_workflow_id as _pure_workflow_id
from taskfleet.core.models.merge_queue import (
    MergeQueueConfig,
    MergeQueueStats,
    MergeQueueStatus,
    QueueEntry,
)
from taskfleet.core.names import DEFAULT_TASK_QUEUE, SIGNAL_ENQUEUE, UPDATE_SUBMIT
from taskfleet.core.workflow_start import entry_payload, merge_queue

__all__ = ["MergeQueueClient", "merge_queue_workflow_id"]


def merge_queue_workflow_id(repo: str, remote: str, target: str,
                            task_queue: str = DEFAULT_TASK_QUEUE) -> str:
    """The queue's workflow id for a clone (a relative path resolved here), remote, target."""
    return _pure_workflow_id(os.path.abspath(repo), remote, target, task_queue)


class MergeQueueClient(LongLivedClient):
    """Talks to the `MergeQueueWorkflow` of one (clone, remote, target), starting it lazily."""

    status_type, stats_type = MergeQueueStatus, MergeQueueStats

    def __init__(self, client: Client, config: MergeQueueConfig,
                 task_queue: str = DEFAULT_TASK_QUEUE):
        super().__init__(client, merge_queue(config, task_queue), config)

    async def enqueue(self, entry: QueueEntry | dict[str, Any]) -> None:
        """Signal-with-start: fire and forget; a bad entry shows up under `rejected` in `status`."""
        await self.signal_with_start(SIGNAL_ENQUEUE, entry_payload(entry))

    async def submit(self, entry: QueueEntry | dict[str, Any]) -> str:
        """Update-with-start: the accepted entry's id, or WorkflowUpdateFailedError saying why."""
        return await self.update_with_start(UPDATE_SUBMIT, entry_payload(entry))
