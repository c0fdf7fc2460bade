"""Is any worker polling a task queue? The server's task-queue description tells (no worker needed)."""

from __future__ import annotations

from datetime import datetime, timezone

from temporalio.api.enums.v1 import PendingWorkflowTaskState, TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowHandle


async def workflow_pollers(client: Client, task_queue: str) -> list[str]:
    """Identities of the workers that polled `task_queue` for workflow tasks recently."""
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return [p.identity for p in response.pollers]


WORKING, WAITING, MISSING = "working", "waiting", "missing"


async def run_worker_state(client: Client, handle: WorkflowHandle, task_queue: str, after: float) -> str:
    """Whether a worker is taking the run's workflow tasks: MISSING (nobody polls the queue, or
    the run's workflow task has waited `after` seconds for one), WORKING (a worker took it), or
    WAITING (too soon to tell).

    The poller list alone is not enough: the server keeps listing a stopped worker for a few
    minutes, so a run started just after its worker stopped would wait in silence.
    """
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
