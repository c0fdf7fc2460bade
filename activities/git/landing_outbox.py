"""A worker's landing ops, sent to their git batcher together.

Tasks that end together would each send their own signal-with-start: one RPC, one history event
and one workflow task of the batcher per task, all on the cores the tasks share. A task's activity
instead hands its op to the worker's outbox (`taskfleet.core.grouped_sends`: one signal in flight
per batcher, what arrives meanwhile leaves together in the next) and returns once the signal
carrying it was accepted by the server, so an activity that returns has submitted its op, as
before. A failed send fails every op it carried: their activities fail and are retried, and the
batcher keeps one op per id whatever arrives twice.

An op may also carry a flush to ask for once it is queued (the board's last tasks ask for one): it
is asked once per group and key, after the activities have returned, and a failed ask is only
logged (the run flushes anyway once its tasks have finished).
"""

from __future__ import annotations

import json
import weakref
from asyncio import AbstractEventLoop, get_running_loop
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Optional

from temporalio import activity

from taskfleet.core.grouped_sends import GroupedSends

# One signal carries at most this many ops and about this much JSON (the batcher takes 500 ops).
SIGNAL_MAX_OPS = 200
SIGNAL_MAX_BYTES = 256 * 1024

SendOps = Callable[[list[dict[str, Any]]], Awaitable[object]]
Ask = Callable[[], Awaitable[object]]


@dataclass
class Outgoing:
    op: dict[str, Any]
    flush_key: Any = None  # ops sent together ask for one flush per key
    flush: Optional[Ask] = None


class LandingOutbox:
    """Per batcher (by workflow id), the grouped sends of this worker's landing ops."""

    def __init__(self) -> None:
        self._by_batcher: dict[str, GroupedSends[Outgoing]] = {}

    async def send(self, batcher_id: str, op: dict[str, Any], send_ops: SendOps,
                   flush: Optional[tuple[Any, Ask]] = None) -> None:
        """Return once a signal carrying `op` reached `batcher_id` (raise what the send raised).
        `send_ops` is used by the first caller for a batcher: every task of a worker reaches a
        batcher through the same client and task queue."""
        sends = self._by_batcher.get(batcher_id)
        if sends is None:
            async def send(items: list[Outgoing]) -> object:
                return await send_ops([item.op for item in items])

            async def after(items: list[Outgoing]) -> None:
                asks = {item.flush_key: item.flush for item in items if item.flush is not None}
                for ask in asks.values():
                    try:
                        await ask()
                    except Exception as err:  # noqa: BLE001 - the run's own flush lands them anyway
                        activity.logger.warning("could not ask %s to flush: %s", batcher_id, err)

            sends = self._by_batcher[batcher_id] = GroupedSends(
                send, max_items=SIGNAL_MAX_OPS, max_bytes=SIGNAL_MAX_BYTES,
                size=lambda item: len(json.dumps(item.op, default=str)), after=after,
            )
        key, ask = flush if flush is not None else (None, None)
        await sends.send(Outgoing(op, key, ask))


_OUTBOXES: weakref.WeakKeyDictionary[AbstractEventLoop, LandingOutbox] = weakref.WeakKeyDictionary()


def outbox() -> LandingOutbox:
    """The outbox of the running event loop (a worker's activities share one)."""
    loop = get_running_loop()
    box = _OUTBOXES.get(loop)
    if box is None:
        box = _OUTBOXES[loop] = LandingOutbox()
    return box
