"""Sends that share a trip: one send in flight at a time, and what is handed over meanwhile leaves
together in the next, so many small messages to one workflow do not each cost an RPC, a history
event and a workflow task; a lone message leaves at once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, Optional, TypeVar

T = TypeVar("T")


class SenderStopped(Exception):
    """The sender was cancelled (its event loop is stopping) before this item left."""


class GroupedSends(Generic[T]):
    """Items for one receiver, sent in groups of at most `max_items` and about `max_bytes`.
    `after(items)` runs once a group was sent, after its callers returned."""

    def __init__(
        self,
        send: Callable[[list[T]], Awaitable[object]],
        *,
        max_items: int,
        max_bytes: int,
        size: Callable[[T], int],
        after: Optional[Callable[[list[T]], Awaitable[None]]] = None,
    ) -> None:
        self._send = send
        self._after = after
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._size = size
        self._waiting: list[tuple[T, asyncio.Future[None]]] = []
        self._sender: Optional[asyncio.Task[None]] = None

    async def send(self, item: T) -> None:
        """Return once a send carrying `item` succeeded, or raise what it raised; a caller cancelled
        before its item left takes it back."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if self._sender is None:
            self._sender = asyncio.create_task(self._drain())
        await future

    def _take(self) -> list[tuple[T, asyncio.Future[None]]]:
        taken, size = 0, 0
        for item, _ in self._waiting:
            cost = self._size(item)
            if taken and (taken == self._max_items or size + cost > self._max_bytes):
                break
            taken, size = taken + 1, size + cost
        group, self._waiting = self._waiting[:taken], self._waiting[taken:]
        return group

    async def _drain(self) -> None:
        try:
            while self._waiting:
                live = [(item, future) for item, future in self._take() if not future.done()]
                if not live:
                    continue
                items = [item for item, _ in live]
                try:
                    await self._send(items)
                except Exception as err:  # noqa: BLE001 - each caller of the group raises it
                    _settle(live, err)
                    continue
                except BaseException:
                    _settle(live, SenderStopped("stopped before this was sent"))
                    raise
                _settle(live, None)
                if self._after is not None:
                    try:
                        await self._after(items)
                    except Exception:  # noqa: BLE001, S110 - `after` reports its own failures
                        pass
        finally:
            left, self._waiting = self._waiting, []
            _settle(left, SenderStopped("stopped before this was sent"))
            self._sender = None


def _settle(waiting: list[tuple[T, asyncio.Future[None]]], err: Optional[Exception]) -> None:
    for _, future in waiting:
        if future.done():
            continue
        if err is None:
            future.set_result(None)
        else:
            future.set_exception(err)
