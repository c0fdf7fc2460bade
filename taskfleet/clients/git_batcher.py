"""Client side of the git batcher: its workflow id, and sending ops that start it when needed."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from typing import Any

from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from taskfleet.clients.long_lived import LongLivedClient
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
    SIGNAL_ENQUEUE,
    UPDATE_FLUSH_NOW,
    UPDATE_RETRY,
    UPDATE_SUBMIT,
)
from taskfleet.core.workflow_start import git_batcher, op_payload

__all__ = ["GitBatcherClient", "git_batch_workflow_id", "op_payload"]

# One `enqueue` signal carries at most this many ops and this much JSON (the batcher takes 500).
SIGNAL_MAX_OPS = 200
SIGNAL_MAX_BYTES = 256 * 1024


def git_batch_workflow_id(repo: str, remote: str = "origin",
                          task_queue: str = DEFAULT_TASK_QUEUE) -> str:
    """The batcher's workflow id for a clone (a relative path resolved here), remote and queue."""
    return _pure_workflow_id(os.path.abspath(repo), remote, task_queue)


class GitBatcherClient(LongLivedClient):
    """Talks to the `GitBatchWorkflow` of one (clone, remote), starting it lazily."""

    status_type, stats_type = GitBatchStatus, GitBatchStats

    def __init__(self, client: Client, config: GitBatchConfig,
                 task_queue: str = DEFAULT_TASK_QUEUE):
        super().__init__(client, git_batcher(config, task_queue), config)
        self._sends: GroupedSends[dict[str, Any]] = GroupedSends(
            self._send_ops, max_items=SIGNAL_MAX_OPS, max_bytes=SIGNAL_MAX_BYTES,
            size=lambda op: len(json.dumps(op, default=str)),
        )

    async def enqueue(self, op: GitOp | dict[str, Any]) -> None:
        """Signal-with-start, returning once the op is with the server (bad ops show under
        `rejected`); ops sent meanwhile share the next signal."""
        await self._sends.send(op_payload(op))

    async def _send_ops(self, ops: list[dict[str, Any]]) -> None:
        await self.signal_with_start(SIGNAL_ENQUEUE, ops[0] if len(ops) == 1 else ops)

    async def submit(self, op: GitOp | dict[str, Any]) -> str:
        """Update-with-start: the accepted op id, or raises with the reason it was refused."""
        return await self.update_with_start(UPDATE_SUBMIT, op_payload(op))

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


def _workflow_not_ready(err: RPCError) -> bool:
    """The server's answer to an update while the workflow's last task failed: retryable."""
    return err.status == RPCStatusCode.FAILED_PRECONDITION and any(
        detail.type_url.endswith("WorkflowNotReadyFailure") for detail in err.grpc_status.details
    )
