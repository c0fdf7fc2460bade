"""Client side of a long-lived workflow: started by the first message sent to it (signal- or
update-with-start), then flushed and asked by its id."""

from __future__ import annotations

from typing import Any, TypeVar

from temporalio.client import Client, WithStartWorkflowOperation, WorkflowHandle

from taskfleet.core.names import QUERY_STATS, QUERY_STATUS, SIGNAL_FLUSH
from taskfleet.core.workflow_start import LongLived

T = TypeVar("T")


class LongLivedClient:
    status_type: type = object
    stats_type: type = object

    def __init__(self, client: Client, target: LongLived, config: Any) -> None:
        self.client = client
        self.target = target
        self.config = config
        self.task_queue = target.task_queue
        self.workflow_id = target.workflow_id

    @property
    def handle(self) -> WorkflowHandle:
        return self.client.get_workflow_handle(self.workflow_id)

    async def signal_with_start(self, signal: str, payload: Any) -> None:
        """Returns once the message is with the server; a bad one shows under `rejected`."""

        async def start(options: dict[str, Any]) -> Any:
            return await self.client.start_workflow(self.target.workflow_type, self.config,
                                                    start_signal=signal,
                                                    start_signal_args=[payload], **options)

        await self.target.start(start)

    async def update_with_start(self, update: str, payload: Any, result_type: type[T] = str) -> T:
        """The update's answer, or WorkflowUpdateFailedError with the reason it was refused."""

        async def start(options: dict[str, Any]) -> T:
            operation = WithStartWorkflowOperation(self.target.workflow_type,
                                                   self.config, **options)
            return await self.client.execute_update_with_start_workflow(
                update, payload, start_workflow_operation=operation, result_type=result_type)

        return await self.target.start(start)

    async def flush(self) -> None:
        await self.handle.signal(SIGNAL_FLUSH)

    async def status(self) -> Any:
        return await self.handle.query(QUERY_STATUS, result_type=self.status_type)

    async def stats(self) -> Any:
        """Just the counters of `status`: cheap to ask often."""
        return await self.handle.query(QUERY_STATS, result_type=self.stats_type)
