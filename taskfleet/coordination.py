"""The coordination worker: every taskfleet worker also polls one task queue for the lease locks,
one per resource, which cannot follow each board's queue (`taskfleet-coordination`, or
`TASKFLEET_COORDINATION_QUEUE`). Workers of one process sharing a client share one coordination
worker: the first starts it, the last stops it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from temporalio.client import Client
from temporalio.worker import Worker, WorkflowRunner

from taskfleet.workflows.lease_lock import LeaseLockWorkflow

log = logging.getLogger("taskfleet.coordination")


class _Shared:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.users = 0
        self.ready = asyncio.Event()


_RUNNING: dict[tuple[int, str, str], _Shared] = {}


@asynccontextmanager
async def coordination_worker(client: Client, queue: str,
                              runner: WorkflowRunner) -> AsyncIterator[None]:
    """Poll `queue` for the lease locks while inside (shared by this client's taskfleet workers)."""
    key = (id(client), client.namespace, queue)
    shared = _RUNNING.get(key)
    if shared is None:
        shared = _RUNNING[key] = _Shared(
            Worker(client, task_queue=queue, workflows=[LeaseLockWorkflow], workflow_runner=runner))
        shared.users += 1
        try:
            await shared.worker.__aenter__()
        except BaseException:
            del _RUNNING[key]
            raise
        finally:
            shared.ready.set()
        log.info("taskfleet coordination: polling task queue %s (lease locks)", queue)
    else:
        shared.users += 1
        await shared.ready.wait()
    try:
        yield
    finally:
        shared.users -= 1
        if shared.users == 0 and _RUNNING.get(key) is shared:
            del _RUNNING[key]
            await shared.worker.__aexit__(None, None, None)
