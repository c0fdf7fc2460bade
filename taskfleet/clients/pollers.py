"""Is any worker polling a task queue? The server's task-queue description tells."""

from __future__ import annotations

from datetime import datetime, timezone

from temporalio.api.enums.v1 import PendingWorkflowTaskState
from temporalio.client import Client, WorkflowHandle

from taskfleet.activities.pods.queue_watch import workflow_pollers

__all__ = ["MISSING", "WAITING", "WORKING", "run_worker_state", "workflow_pollers"]

WORKING, WAITING, MISSING = "working", "waiting", "missing"


async def run_worker_state(client: Client, handle: WorkflowHandle, task_queue: str,
                           after: float) -> str:
    """MISSING (nobody polls, or the workflow task has waited `after` seconds), WORKING, or WAITING;
    the poller list alone still shows a stopped worker for minutes."""
    if not await workflow_pollers(client, task_queue):
        return MISSING
    raw = (await handle.describe()).raw_description
    if not raw.HasField("pending_workflow_task"):
        return WORKING
    pending = raw.pending_workflow_task
    if pending.state != PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED:
        return WORKING
    waited = datetime.now(timezone.utc) - pending.scheduled_time.ToDatetime(tzinfo=timezone.utc)
    return MISSING if waited.total_seconds() >= after else WAITING
