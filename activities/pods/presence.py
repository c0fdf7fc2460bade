"""A worker's presence: a lease it holds for its whole life, named in every worktree it registers.
Pods cannot see each other's processes, so liveness is asked of the lock: `sweep(clone)` tries
each other key's lease without waiting; granted means that worker is gone (a live worker's lease
is never granted), and the sweeper removes its registrations."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Optional

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from taskfleet.activities.pods.lease import Lease, LeaseLock
from taskfleet.activities.pods.shared_clone import Registration, owner_reason, registrations
from taskfleet.core.models.lease_lock import LeaseLockConfig
from taskfleet.core.pod import pod_id

log = logging.getLogger("taskfleet.presence")

PRESENCE_PREFIX = "taskfleet-worker"
PRESENCE_LEASE_SECONDS = 30.0
# A dead worker's presence workflow closes this long after its last use (a sweep restarts it).
PRESENCE_IDLE_CLOSE_SECONDS = 3600.0
# A key found alive is asked again only after this long.
ALIVE_RECHECK_SECONDS = 30.0


def presence_resource(pod: str, key: str) -> str:
    return f"{PRESENCE_PREFIX}/{pod}/{key}"


class WorkerPresence:
    def __init__(
        self,
        client: Client,
        task_queue: str,
        pod: Optional[str] = None,
        lease_seconds: float = PRESENCE_LEASE_SECONDS,
        alive_recheck_seconds: float = ALIVE_RECHECK_SECONDS,
    ) -> None:
        self.client = client
        self.task_queue = task_queue
        self.pod = pod or pod_id()
        self.lease_seconds = lease_seconds
        self.alive_recheck_seconds = alive_recheck_seconds
        # Known before the lease is held, so worktree lock reasons can name it; nothing is
        # registered under it until `ready` (a sweeper would take a key nobody holds yet).
        self.key = uuid.uuid4().hex[:12]
        self.lease: Optional[Lease] = None
        self._stack: Optional[AsyncExitStack] = None
        self._alive: dict[str, float] = {}  # other keys found alive -> when to ask again
        self._missing_since: dict[str, float] = {}  # keys whose lock was not found -> since when
        self._own_keys: set[str] = {self.key}  # keys this process held: its pool drops those slots
        self._ready: Optional[asyncio.Event] = None
        self._renewing: Optional[asyncio.Lock] = None

    @property
    def ready(self) -> asyncio.Event:
        if self._ready is None:
            self._ready = asyncio.Event()
        return self._ready

    def _lock(self, pod: str, key: str) -> LeaseLock:
        resource = presence_resource(pod, key)
        config = LeaseLockConfig(resource=resource,
                                 close_after_idle_seconds=PRESENCE_IDLE_CLOSE_SECONDS)
        return LeaseLock(self.client, resource, task_queue=self.task_queue,
                         lease_seconds=self.lease_seconds, acquire_timeout=60.0, config=config)

    async def start(self) -> None:
        """Take the presence lease (its own key: never waits for an earlier incarnation's)."""
        stack = AsyncExitStack()
        self.lease = await stack.enter_async_context(
            # Released by signal: a stopping worker may no longer run the lock workflow itself.
            self._lock(self.pod, self.key).hold(holder=f"{self.pod}/{os.getpid()}",
                                                wait_release=False)
        )
        self._stack = stack
        self.ready.set()
        log.info("presence lease %s held (token %d)", presence_resource(self.pod, self.key),
                 self.lease.token)

    async def wait_ready(self, timeout: float = 120.0) -> None:
        """Until the lease is held (the worker takes it as it starts polling)."""
        if self.ready.is_set():
            return  # the usual case: no trip through the event loop on a task's set-up
        try:
            await asyncio.wait_for(self.ready.wait(), timeout)
        except asyncio.TimeoutError:
            raise RuntimeError(f"worker presence lease {presence_resource(self.pod, self.key)} not "
                               f"granted within {timeout:g} s") from None

    async def stop(self) -> None:
        self.ready.clear()
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()

    async def ensure(self) -> None:
        """If the lock says the lease is lost, take one under a new key (once for all who ask)."""
        if self.lease is not None and not self.lease.lost:
            return
        if self._renewing is None:
            self._renewing = asyncio.Lock()
        async with self._renewing:
            if self.lease is not None and self.lease.lost:
                log.warning("presence lease %s lost (%s): taking a new one", self.key,
                            self.lease.lost)
                await self.stop()
                self.key = uuid.uuid4().hex[:12]
                self._own_keys.add(self.key)
                await self.start()

    @property
    def reason(self) -> str:
        """The lock reason of every worktree this worker registers."""
        return owner_reason(self.pod, self.key)

    def worktree_add_args(self) -> tuple[str, ...]:
        return ("--lock", "--reason", self.reason)

    async def _lock_running(self, lock: LeaseLock) -> bool:
        try:
            described = await self.client.get_workflow_handle(lock.workflow_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return described.status == WorkflowExecutionStatus.RUNNING

    async def sweep(self, clone: str | Path) -> list[Path]:
        """Remove the registrations of dead workers in `clone` (only those naming a presence lease);
        returns their paths. Folders are deleted only when they belong to this pod."""
        groups: dict[tuple[str, str], list[Registration]] = {}
        for reg in registrations(clone):
            if reg.owner and reg.lease and reg.lease not in self._own_keys:
                groups.setdefault((reg.owner, reg.lease), []).append(reg)
        removed: list[Path] = []
        now = time.monotonic()
        for (pod, key), regs in sorted(groups.items()):
            if self._alive.get(key, 0.0) > now:
                continue
            lock = self._lock(pod, key)
            if not await self._lock_running(lock):
                # No such lock (a server that started over, a lock closed when idle) says nothing of
                # its worker, which takes its lease again at its next renewal: gone only if it has
                # not after two whole leases.
                first = self._missing_since.setdefault(key, now)
                if now - first < 2 * self.lease_seconds:
                    self._alive[key] = first + 2 * self.lease_seconds
                    continue
            self._missing_since.pop(key, None)
            lease = await lock.try_acquire(holder=f"sweeper {self.pod}/{self.key}")
            if lease is None:
                self._alive[key] = now + self.alive_recheck_seconds
                continue
            try:
                for reg in regs:
                    lease.check()
                    if pod == self.pod:
                        shutil.rmtree(reg.path, ignore_errors=True)
                    shutil.rmtree(reg.admin_dir, ignore_errors=True)
                    removed.append(reg.path)
                log.warning("removed %d worktree registration(s) of gone worker %s/%s in %s",
                            len(regs), pod, key, clone)
            finally:
                await lock.release(lease)
        return removed
