"""Is a workflow waiting on a task queue no worker polls? Asked while a call waits on it, to name
the missing queue within seconds. The poller list lists a stopped worker for minutes; a workflow
task no worker took for seconds says it (a polling worker takes one in milliseconds)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from temporalio.api.enums.v1 import PendingWorkflowTaskState, TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

# A workflow task waiting this long untaken means nobody serves the queue (longer than the 5 s a
# task waits on a dead worker's sticky queue).
UNSERVED_SECONDS = 10.0


@dataclass
class Unserved:
    """A workflow whose next step waits for a worker on `task_queue`, since `waited` seconds."""

    workflow_id: str
    task_queue: str
    waited: float
    pollers: list[str]

    def describe(self) -> str:
        listed = (f" (the server still lists {', '.join(self.pollers[:3])}, gone or stuck)"
                  if self.pollers else "")
        return (f"workflow {self.workflow_id} runs on task queue '{self.task_queue}', where no "
                f"worker has taken its work for {self.waited:.0f} s{listed}")


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


async def unserved(client: Client, workflow_id: str,
                   after: float = UNSERVED_SECONDS) -> Unserved | None:
    """The workflow's queue once its pending workflow task has waited `after` seconds (or nobody
    polls it); None while served, closed, or unknown."""
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError:
        return None
    if description.status != WorkflowExecutionStatus.RUNNING:
        return None
    raw = description.raw_description
    queue = raw.execution_config.task_queue.name or description.task_queue
    if not raw.HasField("pending_workflow_task"):
        return None
    pending = raw.pending_workflow_task
    if pending.state != PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED:
        return None
    waited = (datetime.now(timezone.utc) - pending.scheduled_time.ToDatetime(
        tzinfo=timezone.utc)).total_seconds()
    pollers = await workflow_pollers(client, queue)
    if waited >= after or (not pollers and waited >= 1.0):
        return Unserved(workflow_id, queue, waited, pollers)
    return None
