"""Is any worker polling a task queue? The server's task-queue description tells (no worker needed)."""

from __future__ import annotations

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client


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
