"""A worker's landing ops, sent to their git batcher together.

Tasks that end together would each send their own signal-with-start: one RPC, one history event
and one workflow task of the batcher per task, all on the cores the tasks share. A task's activity
instead hands its op to the worker's outbox and waits until the signal carrying it has been
accepted by the server, so an activity that returns has submitted its op, as before. One signal is
in flight per batcher; ops handed over meanwhile leave together in the next one, as a list (which
`enqueue` takes). So a lone task's op leaves at once, and under load one signal carries many.

A failed send fails every op it carried: their activities fail and are retried, and the batcher
keeps one op per id whatever arrives twice.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

# The most ops one signal carries: the batcher's `enqueue` refuses a longer list.
MAX_OPS_PER_SIGNAL = 500

Send = Callable[[list[dict[str, Any]]], Awaitable[object]]


class LandingOutbox:
    """Ops waiting to leave, per batcher (by workflow id), and the sender of each."""

    def __init__(self) -> None:
        self._waiting: dict[str, list[tuple[dict[str, Any], asyncio.Future[None]]]] = {}
        self._senders: dict[str, asyncio.Task[None]] = {}

    async def send(self, batcher_id: str, op: dict[str, Any], send: Send) -> None:
        """Return once a signal carrying `op` reached `batcher_id` (raise what the send raised).

        `send` sends a list of ops; the sender uses the one of the call that finds it idle (every
        task of a worker reaches a batcher through the same client and task queue)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(batcher_id, []).append((op, future))
        if batcher_id not in self._senders:
            self._senders[batcher_id] = asyncio.create_task(self._drain(batcher_id, send))
        await future

    async def _drain(self, batcher_id: str, send: Send) -> None:
        try:
            while self._waiting.get(batcher_id):
                waiting = self._waiting[batcher_id]
                taken, self._waiting[batcher_id] = waiting[:MAX_OPS_PER_SIGNAL], waiting[MAX_OPS_PER_SIGNAL:]
                live = [(op, future) for op, future in taken if not future.done()]  # a cancelled task's op stays home
                if not live:
                    continue
                try:
                    await send([op for op, _ in live])
                except Exception as err:  # noqa: BLE001 - each waiting activity raises it
                    _settle(live, err)
                else:
                    _settle(live, None)
        finally:
            # Only a cancelled sender (the worker stopping) leaves ops behind: their activities fail.
            left = self._waiting.pop(batcher_id, [])
            _settle(left, RuntimeError("the worker stopped before this task's landing op was sent"))
            del self._senders[batcher_id]


def _settle(waiting: list[tuple[dict[str, Any], asyncio.Future[None]]], err: Exception | None) -> None:
    for _, future in waiting:
        if future.done():
            continue
        if err is None:
            future.set_result(None)
        else:
            future.set_exception(err)


_OUTBOXES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LandingOutbox] = weakref.WeakKeyDictionary()


def outbox() -> LandingOutbox:
    """The outbox of the running event loop (a worker's activities share one)."""
    loop = asyncio.get_running_loop()
    box = _OUTBOXES.get(loop)
    if box is None:
        box = _OUTBOXES[loop] = LandingOutbox()
    return box
