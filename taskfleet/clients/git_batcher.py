"""Client side of the git batcher: its workflow id, and sending ops that start it when needed."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from typing import Any

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from taskfleet.core.git_batch_start import op_payload, with_start_options
from taskfleet.core.grouped_sends import GroupedSends
from taskfleet.core.ids import git_batch_workflow_id as _pure_workflow_id
from taskfleet.core.models.git_batch import (
    BatchResult,
    GitBatchConfig,
    GitBatchStats,
    GitBatchStatus,
    GitOp,
)
from taskfleet.core.names import (
    CONTINUING_AS_NEW,
    DEFAULT_TASK_QUEUE,
    GIT_BATCH_WORKFLOW,
    QUERY_STATS,
    QUERY_STATUS,
    SIGNAL_ENQUEUE,
    SIGNAL_FLUSH,
    UPDATE_FLUSH_NOW,
    UPDATE_RETRY,
    UPDATE_SUBMIT,
)

__all__ = ["GitBatcherClient", "git_batch_workflow_id", "op_payload"]

# One `enqueue` signal carries at most this many ops and this much JSON (the batcher takes 500).
SIGNAL_MAX_OPS = 200
SIGNAL_MAX_BYTES = 256 * 1024


def git_batch_workflow_id(repo: str, remote: str = "origin",
                          task_queue: str = DEFAULT_TASK_QUEUE) -> str:
    """The batcher's workflow id for a clone (a relative path resolved here), remote and queue."""
    return _pure_workflow_id(os.path.abspath(repo), remote, task_queue)


class GitBatcherClient:
    """Talks to the `GitBatchWorkflow` of one (clone, remote), starting it lazily."""

    def __init__(self, client: Client, config: GitBatchConfig,
                 task_queue: str = DEFAULT_TASK_QUEUE):
        self.client = client
        self.config = config
        self.task_queue = task_queue
        self.workflow_id = git_batch_workflow_id(config.repo, config.remote, task_queue)
        self._sends: GroupedSends[dict[str, Any]] = GroupedSends(
            self._send_ops, max_items=SIGNAL_MAX_OPS, max_bytes=SIGNAL_MAX_BYTES,
            size=lambda op: len(json.dumps(op, default=str)),
        )

    @property
    def handle(self) -> WorkflowHandle:
        return self.client.get_workflow_handle(self.workflow_id)

    async def enqueue(self, op: GitOp | dict[str, Any]) -> None:
        """Signal-with-start, returning once the op is with the server (bad ops show under
        `rejected`); ops sent meanwhile share the next signal."""
        await self._sends.send(op_payload(op))

    async def _send_ops(self, ops: list[dict[str, Any]]) -> None:
        payload: Any = ops[0] if len(ops) == 1 else ops

        async def start(options: dict[str, Any]) -> Any:
            return await self.client.start_workflow(GIT_BATCH_WORKFLOW, self.config,
                                                    start_signal=SIGNAL_ENQUEUE,
                                                    start_signal_args=[payload], **options)

        await with_start_options(start, self.config, self.task_queue)

    async def submit(self, op: GitOp | dict[str, Any]) -> str:
        """Update-with-start: the accepted op id, or raises with the reason it was refused."""

        async def start(options: dict[str, Any]) -> str:
            operation = WithStartWorkflowOperation(GIT_BATCH_WORKFLOW, self.config, **options)
            return await self.client.execute_update_with_start_workflow(
                UPDATE_SUBMIT, op_payload(op), start_workflow_operation=operation, result_type=str
            )

        return await with_start_options(start, self.config, self.task_queue)

    async def flush(self) -> None:
        await self.handle.signal(SIGNAL_FLUSH)

    async def flush_now(self) -> BatchResult:
        return await self._waiting_update(UPDATE_FLUSH_NOW)

    async def retry(self, batch_id: str) -> BatchResult:
        return await self._waiting_update(UPDATE_RETRY, batch_id)

    async def _waiting_update(self, name: str, *args: Any, timeout: float = 120.0) -> BatchResult:
        """An update waiting on a batch, resent under one update id while the batcher refuses it
        (`ContinuingAsNew`, or `WorkflowNotReadyFailure` after a failed task)."""
        deadline = time.monotonic() + timeout
        update_id = str(uuid.uuid4())
        while True:
            try:
                return await self.handle.execute_update(name, args=list(args), id=update_id,
                                                        result_type=BatchResult)
            except WorkflowUpdateFailedError as err:
                cause = err.cause
                busy = isinstance(cause, ApplicationError) and cause.type == CONTINUING_AS_NEW
                if not busy or time.monotonic() > deadline:
                    raise
            except RPCError as err:
                if not _workflow_not_ready(err) or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.2)

    async def status(self) -> GitBatchStatus:
        return await self.handle.query(QUERY_STATUS, result_type=GitBatchStatus)

    async def stats(self) -> GitBatchStats:
        return await self.handle.query(QUERY_STATS, result_type=GitBatchStats)


def _workflow_not_ready(err: RPCError) -> bool:
    """The server's answer to an update while the workflow's last task failed: retryable."""
    return err.status == RPCStatusCode.FAILED_PRECONDITION and any(
        detail.type_url.endswith("WorkflowNotReadyFailure") for detail in err.grpc_status.details
    )
