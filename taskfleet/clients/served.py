"""A client call that waits on a workflow (`lessons query`, `git flush --wait`), turned into one
clear line naming the queue within seconds when no worker polls it, instead of a silent wait."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from temporalio.client import Client

from taskfleet.activities.pods.queue_watch import UNSERVED_SECONDS, unserved
from taskfleet.core.errors import StartupError

T = TypeVar("T")


class NoWorkerServes(StartupError):
    """Printed as one line by the CLI (exit code 2)."""


async def served(client: Client, workflow_id: str, call: Awaitable[T], what: str,
                 after: float = UNSERVED_SECONDS, every: float = 1.0) -> T:
    """`call`'s result, or NoWorkerServes once its workflow has waited `after` seconds for a worker
    (at once when nobody polls the queue)."""
    task = asyncio.ensure_future(call)
    try:
        while not (await asyncio.wait({task}, timeout=every))[0]:
            stuck = await unserved(client, workflow_id, after)
            if stuck is not None:
                raise NoWorkerServes(
                    f"{what} cannot finish: {stuck.describe()}; start a worker there: "
                    f"`taskfleet-worker --task-queue {stuck.task_queue}`"
                )
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
