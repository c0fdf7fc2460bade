"""A workflow cancelled while its own signal to another workflow is in flight stops, on a real
server.

The SDK lets a signal in flight take a cancel of the sender; `send_signal` raises it afterwards. The
sender here does nothing but signal, one signal after another, catching each signal's failure as
the orchestrator's flush request and a task's stage report do, so every cancel meets a signal.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio import workflow
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import CancelledError

from taskfleet.workflows.signals_out import send_signal
from tests.conftest import eventually

# far more than arrive before the test's cancel: the sender ends by the cancel, or fails the test
PINGS = 2000


@workflow.defn(name="PingCounter", sandboxed=False)
class PingCounter:
    """The receiver: counts the pings."""

    def __init__(self) -> None:
        self.count = 0

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name="ping")
    def ping(self) -> None:
        self.count += 1

    @workflow.query(name="count")
    def pings(self) -> int:
        return self.count


@workflow.defn(name="Pinger", sandboxed=False)
class Pinger:
    """The sender: signals the receiver `PINGS` times, ignoring each signal's failure."""

    @workflow.run
    async def run(self, target: str) -> int:
        for _ in range(PINGS):
            try:
                await send_signal(target, "ping")
            except Exception:  # noqa: BLE001 - best effort, as the product's callers are
                pass
        return PINGS


async def test_a_cancel_during_a_signal_stops_the_sender(client, make_worker, task_queue):
    target, sender = f"pings-{uuid.uuid4().hex[:8]}", f"pinger-{uuid.uuid4().hex[:8]}"
    async with make_worker(workflows=[PingCounter, Pinger]):
        receiver = await client.start_workflow(PingCounter.run, id=target, task_queue=task_queue)
        handle = await client.start_workflow(Pinger.run, target, id=sender, task_queue=task_queue)

        async def pinging():
            assert await receiver.query(PingCounter.pings) >= 3

        await eventually(pinging, timeout=60)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as ended:
            await asyncio.wait_for(handle.result(), timeout=60)
        assert isinstance(ended.value.cause, CancelledError), ended.value.cause
        assert await receiver.query(PingCounter.pings) < PINGS
        await receiver.terminate()
