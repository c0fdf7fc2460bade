"""A pool slot (one reusable checkout of a clone), the task's view of it, and a clone's free list.
A free slot is a clean checkout detached at `head`; its watch records what a task touched so the
scrub puts back only those paths (`touched` None: unknown, scan the tree). A task finding no free
slot waits for one being scrubbed: cheaper than a new slot's checkout of the whole tree."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from taskfleet.activities.git import slot_watch
from taskfleet.activities.git.git_async import Heartbeat
from taskfleet.activities.git.slot_settings import index_stamp


@dataclass(eq=False)
class Slot:
    name: str
    path: Path
    clone: str  # the clone's absolute path
    lock: IO[bytes]
    lease: str = ""  # the presence key it was registered under
    head: str = ""  # the commit its clean checkout is at (set when it goes back on the free list)
    settings: tuple[bytes, bytes, bool] = (b"", b"", False)  # `slot_settings` when it was made
    # The kernel's account of what the task's commands touched (slot_watch); `touched` is None when
    # not known (no watch, or events lost): then the scrub scans the tree.
    watch: slot_watch.SlotWatch | None = None
    touched: set[str] | None = None
    index_stamp: tuple = ()  # the index file when the task began: unchanged means the base's

    def drain(self) -> set[str] | None:
        """The paths touched since the last drain, also added to `touched`; None when unknown."""
        got = self.watch.take() if self.watch is not None else None
        if got is None:
            self.touched = None
        elif self.touched is not None:
            self.touched |= got
        return got

    def begin(self) -> None:
        """A task starts on a clean slot: what happened before (checkout, scrub) is forgotten."""
        if self.watch is not None and self.watch.take() is None:
            self.watch.close()  # events were lost: its watches may name the wrong folders
            self.watch = slot_watch.watch(self.path)
        self.touched = set() if self.watch is not None else None
        self.index_stamp = index_stamp(self.path)

    def close_watch(self) -> None:
        if self.watch is not None:
            self.watch.close()
            self.watch = None


@dataclass
class Worktree:
    path: Path
    base_commit: str
    slot: Slot
    setup_seconds: float = 0.0
    new_slot: bool = False
    tree: str = ""  # the implementer's work, snapshotted in process; "": staged by git


@dataclass
class CloneSlots:
    """This worker's slots of one clone."""

    free: list[Slot] = field(default_factory=list)
    owned: set[Slot] = field(default_factory=set)
    recycling: int = 0  # slots being scrubbed right now: back on `free` soon
    waiting: list[asyncio.Future] = field(default_factory=list)  # takers told when a scrub ends

    def scrub_ended(self) -> None:
        self.recycling -= 1
        waiting, self.waiting = self.waiting, []
        for waiter in waiting:
            if not waiter.done():
                waiter.set_result(None)

    def pop_free(self, base_commit: str) -> Slot | None:
        """A free slot, one already at `base_commit` first."""
        for i in range(len(self.free) - 1, -1, -1):
            if self.free[i].head == base_commit:
                return self.free.pop(i)
        return self.free.pop() if self.free else None

    async def wait_free(self, base_commit: str, heartbeat: Heartbeat) -> Slot | None:
        """A free slot; while none is free but some are being scrubbed, the first of those to be
        ready: cheaper than a new slot's full checkout, and keeps the pool at the window's size."""
        slot = self.pop_free(base_commit)
        while slot is None and self.recycling > 0:
            waiter = asyncio.get_running_loop().create_future()
            self.waiting.append(waiter)
            while not waiter.done():
                await asyncio.wait({waiter}, timeout=1.0)
                heartbeat()
            slot = self.pop_free(base_commit)
        return slot
