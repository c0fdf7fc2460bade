"""A client call that waits on a workflow, turned into one clear line when no worker serves it.

`taskfleet lessons query` waits for a worker to answer; `taskfleet git flush --wait` for the
batcher to push. Neither can progress while no worker polls the workflow's task queue: instead of
waiting in silence, the call ends within seconds naming that queue (see
`activities/pods/queue_watch.py` for how "no worker" is told apart from "busy").
"""

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


async def served(client: Client, workflow_id: str, call: Awaitable[T], what: str, after: float = UNSERVED_SECONDS,
                 every: float = 1.0) -> T:
    """`call`'s result, or NoWorkerServes once the workflow it waits on has waited `after` seconds
    for a worker (at once when nobody polls its queue at all)."""
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
