"""A worker's landing ops, sent to their git batcher together: one signal in flight per batcher,
what arrives meanwhile leaves in the next. An activity returns once its op's signal is accepted;
a failed send fails all ops it carried (retried; the batcher keeps one op per id). A flush an op
asks for is asked once per group and key."""

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
        """Return once a signal carrying `op` reached `batcher_id` (or raise what the send raised);
        the first caller's `send_ops` serves the batcher (one client and queue per worker)."""
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
