"""Signals a workflow sends to another workflow from its main coroutine, without losing a cancel.

The SDK lets a signal in flight decide what a cancel of the sending workflow means: a signal not
yet sent is cancelled (it fails with a `CancelledError` failure), one already sent completes, and
either way the cancel is spent. A workflow that caught the signal's failure (a stage report, a
flush request: both best effort) would then go on as if nobody had cancelled it, waiting for
landings or verdicts until they came. `send_signal` settles the signal, then, if the workflow was
cancelled meanwhile, raises `asyncio.CancelledError` where the signal was awaited, as any other
await would have.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow

from taskfleet.workflows import compat


async def send_signal(workflow_id: str, signal: str, arg: Any = None) -> None:
    """Signal `workflow_id`; a cancel of this workflow that arrived meanwhile is raised here.
    Failures of the signal itself are the caller's to handle, as with a plain signal."""
    cancelled_before = workflow.cancellation_reason() is not None
    handle = workflow.get_external_workflow_handle(workflow_id)
    try:
        if arg is None:
            await handle.signal(signal)
        else:
            await handle.signal(signal, arg)
    finally:
        if not cancelled_before and workflow.cancellation_reason() is not None \
                and compat.cancel_survives_signals():
            raise asyncio.CancelledError()
