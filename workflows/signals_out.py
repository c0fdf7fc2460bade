"""Signals a workflow sends from its main coroutine without losing a cancel: the SDK spends a cancel
on a signal in flight, so a workflow that caught the signal's failure (best-effort reports) would
go on as if never cancelled: `send_signal` settles the signal, then raises the cancel."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow

from taskfleet.workflows import compat


async def send_signal(workflow_id: str, signal: str, arg: Any = None) -> None:
    """Signal `workflow_id`; a cancel of this workflow that arrived meanwhile is raised here, the
    signal's own failures are the caller's."""
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
