"""Sends that share a trip (a client's burst of git ops, a worker's landing ops): one send in
flight, and what is handed over meanwhile goes in the next one. The sender here is a function that
records the lists it is given and waits for the test's go-ahead, so which item rides in which send
is set by the test, not by timing."""

from __future__ import annotations

import asyncio

import pytest

from taskfleet.activities.git.landing_outbox import LandingOutbox
from taskfleet.core.grouped_sends import GroupedSends


class Sender:
    """Records each list of ops sent; each send waits until the test lets it finish (or fail)."""

    def __init__(self) -> None:
        self.sent: list[list[str]] = []
        self.started = asyncio.Event()
        self._results: asyncio.Queue[Exception | None] = asyncio.Queue()

    async def __call__(self, ops: list[dict]) -> None:
        self.sent.append([op["id"] for op in ops])
        self.started.set()
        err = await self._results.get()
        if err is not None:
            raise err

    def finish(self, err: Exception | None = None) -> None:
        self._results.put_nowait(err)


async def _until(condition, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0)


async def test_ops_handed_over_during_a_send_leave_together_in_the_next() -> None:
    box, send = LandingOutbox(), Sender()
    first = asyncio.create_task(box.send("batcher-a", {"id": "t1"}, send))
    await asyncio.wait_for(send.started.wait(), 5)
    later = [asyncio.create_task(box.send("batcher-a", {"id": f"t{i}"}, send)) for i in (2, 3, 4)]
    await asyncio.sleep(0)
    assert not first.done(), "an op's sender returned before its signal was accepted"
    send.finish()
    await asyncio.wait_for(first, 5)
    await _until(lambda: len(send.sent) == 2)
    assert not any(task.done() for task in later)
    send.finish()
    await asyncio.wait_for(asyncio.gather(*later), 5)
    assert send.sent == [["t1"], ["t2", "t3", "t4"]]


async def test_each_batcher_has_its_own_signal_in_flight() -> None:
    box, send = LandingOutbox(), Sender()
    a = asyncio.create_task(box.send("batcher-a", {"id": "a1"}, send))
    b = asyncio.create_task(box.send("batcher-b", {"id": "b1"}, send))
    await _until(lambda: len(send.sent) == 2)
    send.finish()
    send.finish()
    await asyncio.wait_for(asyncio.gather(a, b), 5)
    assert sorted(send.sent) == [["a1"], ["b1"]]


async def _one_in_flight_two_waiting(box: LandingOutbox, send: Sender) -> list[asyncio.Task]:
    """Op t1's send in flight to one batcher, t2 and t3 waiting behind it for the next send."""
    first = asyncio.create_task(box.send("batcher-a", {"id": "t1"}, send))
    await asyncio.wait_for(send.started.wait(), 5)
    second = asyncio.create_task(box.send("batcher-a", {"id": "t2"}, send))
    third = asyncio.create_task(box.send("batcher-a", {"id": "t3"}, send))
    # both reach the outbox (a task runs to its first wait when the loop turns)
    await asyncio.sleep(0)
    return [first, second, third]


async def test_a_failed_send_fails_each_op_it_carried_and_the_next_send_goes_on() -> None:
    box, send = LandingOutbox(), Sender()
    first, second, third = await _one_in_flight_two_waiting(box, send)
    send.finish(RuntimeError("server unavailable"))
    with pytest.raises(RuntimeError, match="server unavailable"):
        await asyncio.wait_for(first, 5)
    await _until(lambda: len(send.sent) == 2)
    send.finish(RuntimeError("still unavailable"))
    for task in (second, third):
        with pytest.raises(RuntimeError, match="still unavailable"):
            await asyncio.wait_for(task, 5)
    last = asyncio.create_task(box.send("batcher-a", {"id": "t4"}, send))
    await _until(lambda: len(send.sent) == 3)
    send.finish()
    await asyncio.wait_for(last, 5)
    assert send.sent == [["t1"], ["t2", "t3"], ["t4"]]


async def test_the_op_of_a_task_cancelled_before_its_send_stays_home() -> None:
    box, send = LandingOutbox(), Sender()
    first, cancelled, kept = await _one_in_flight_two_waiting(box, send)
    cancelled.cancel()
    send.finish()
    await asyncio.wait_for(first, 5)
    await _until(lambda: len(send.sent) == 2)
    send.finish()
    await asyncio.wait_for(kept, 5)
    assert cancelled.cancelled()
    assert send.sent == [["t1"], ["t3"]]


async def test_a_group_holds_at_most_max_items_and_about_max_bytes() -> None:
    send = Sender()
    sends = GroupedSends(send, max_items=2, max_bytes=30, size=lambda op: len(op["id"]))
    first = asyncio.create_task(sends.send({"id": "a"}))
    await _until(lambda: len(send.sent) == 1)
    rest = [asyncio.create_task(sends.send({"id": name}))
            for name in ("b", "c", "d", "e" * 40, "f")]
    await asyncio.sleep(0)
    for _ in range(5):
        send.finish()
    await asyncio.wait_for(asyncio.gather(first, *rest), 5)
    # two at most; the 40-byte item exceeds the bytes with any other, so it leaves alone
    assert send.sent == [["a"], ["b", "c"], ["d"], ["e" * 40], ["f"]]


async def test_the_board_s_last_ops_ask_for_one_flush_per_group_and_their_tasks_do_not_wait_for_it() -> None:  # noqa: E501
    box, send, asked, release = LandingOutbox(), Sender(), [], asyncio.Event()

    def flush(key: str):
        async def ask() -> None:
            asked.append(key)
            await release.wait()  # an ask that takes its time: no task waits for it
        return key, ask

    first = asyncio.create_task(box.send("batcher-a", {"id": "t1"}, send, flush("run-1")))
    await asyncio.wait_for(send.started.wait(), 5)
    later = [asyncio.create_task(box.send("batcher-a", {"id": f"t{i}"}, send, flush("run-1")))
             for i in (2, 3)]
    later.append(asyncio.create_task(box.send("batcher-a", {"id": "u1"}, send, flush("run-2"))))
    later.append(asyncio.create_task(box.send("batcher-a", {"id": "v1"}, send)))
    await asyncio.sleep(0)
    send.finish()
    await asyncio.wait_for(first, 5)  # returned while its group's ask is still on its way
    assert asked == ["run-1"]
    release.set()
    await _until(lambda: len(send.sent) == 2)
    release.clear()
    send.finish()
    await asyncio.wait_for(asyncio.gather(*later), 5)
    await _until(lambda: len(asked) == 2)
    release.set()
    await _until(lambda: len(asked) == 3)
    assert send.sent == [["t1"], ["t2", "t3", "u1", "v1"]]
    assert asked == ["run-1", "run-1", "run-2"]  # one ask per key and group


async def test_a_failed_flush_is_only_logged_and_the_next_group_still_leaves() -> None:
    box, send = LandingOutbox(), Sender()

    async def fails() -> None:
        raise RuntimeError("batcher unreachable")

    first = asyncio.create_task(box.send("batcher-a", {"id": "t1"}, send, ("run-1", fails)))
    await asyncio.wait_for(send.started.wait(), 5)
    send.finish()
    await asyncio.wait_for(first, 5)
    second = asyncio.create_task(box.send("batcher-a", {"id": "t2"}, send))
    await _until(lambda: len(send.sent) == 2)
    send.finish()
    await asyncio.wait_for(second, 5)
    assert send.sent == [["t1"], ["t2"]]
