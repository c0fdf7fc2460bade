"""Client side of `LeaseLockWorkflow`: `async with LeaseLock(...).hold() as lease:` (activities take
leases). `hold()` acquires with update-with-start, keeps its FIFO place, renews every third of
the lease and releases in `finally`; `lease.check()` raises `LeaseLost` once the lease is gone,
no renewal got through for a whole lease, or (with a `Fence`) a higher token acted."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Optional

from temporalio import activity
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from taskfleet.activities.pods.fence import Fence
from taskfleet.activities.pods.queue_watch import UNSERVED_SECONDS, unserved
from taskfleet.core.errors import root_cause_message
from taskfleet.core.lease_lock import lease_lock_workflow_id
from taskfleet.core.models.lease_lock import (
    DEFAULT_LEASE_SECONDS,
    LEASE_GRANTED,
    LEASE_LOST,
    LEASE_REJECTED,
    LEASE_WAITING,
    AcquireRequest,
    LeaseGrant,
    LeaseLockConfig,
    LeaseLockStatus,
    LeaseRef,
)
from taskfleet.core.names import (
    LEASE_LOCK_WORKFLOW,
    QUERY_HOLDERS,
    SIGNAL_RELEASE_LEASE,
    UPDATE_ACQUIRE,
    UPDATE_RELEASE,
    UPDATE_RENEW,
)
from taskfleet.core.pod import pod_id

log = logging.getLogger("taskfleet.lease")

# Errors no retry mends: the request itself is wrong, or we may not make it.
_FINAL_CODES = {RPCStatusCode.INVALID_ARGUMENT, RPCStatusCode.PERMISSION_DENIED,
                RPCStatusCode.UNAUTHENTICATED}


class LeaseError(RuntimeError):
    """The lock refused the request (bad input, too many waiters) or was not reached in time."""


class NoWorker(LeaseError):
    """The lock's workflow waits on a task queue no worker polls: the message names the queue."""


class _Moved(Exception):
    """A lock stranded on a queue nobody polls was ended, to start again on ours: ask again."""


def _being_cancelled(err: BaseException) -> bool:
    """The client turns a cancelled update call into `WorkflowUpdateRPCTimeoutOrCancelledError`,
    an ordinary exception: a loop that retries failures would swallow its own cancellation (and
    whoever awaits the task after cancelling it would wait forever)."""
    task = asyncio.current_task()
    if task is not None and hasattr(task, "cancelling") and task.cancelling():
        return True
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, asyncio.CancelledError):
            return True
        cause = cause.__cause__
    return False


WATCH_EVERY = 1.0  # while a call waits: how often to ask if anyone serves the lock's queue


class LeaseLost(RuntimeError):
    """The lease ended while its holder still ran: stop acting on the resource."""


@dataclass
class Lease:
    """A held lease: act under `token`; call `check()` before each guarded step."""

    resource: str
    holder: str
    token: int
    lease_seconds: float
    grant: LeaseGrant
    fence: Optional[Fence] = None
    lost: str = ""  # why the lease is gone ("" while held)
    # time.monotonic() by which the lease has surely ended unless a renewal got through
    deadline: float = 0.0
    renewals: int = field(default=0)

    def check(self) -> None:
        """Raise `LeaseLost` unless the lease surely still holds: not lost, within its deadline, and
        (with a fence) no higher token has acted on the resource."""
        if self.lost:
            raise LeaseLost(f"lease on {self.resource} (token {self.token}) lost: {self.lost}")
        if time.monotonic() >= self.deadline:
            raise LeaseLost(f"lease on {self.resource} (token {self.token}) may have ended: no "
                            f"renewal reached the lock within {self.lease_seconds:g} s")
        if self.fence is not None:
            self.fence.check(self.token)


async def _fence_highest(fence: Optional[Fence]) -> int:
    """What the lock must grant above: the fence's highest admitted token (0 without one)."""
    return 0 if fence is None else await asyncio.to_thread(fence.highest)


def default_holder() -> str:
    """`<pod>/<pid>#<8 hex>`: who holds (readable in `holders`) and unique per acquisition."""
    return f"{pod_id()}/{os.getpid()}#{uuid.uuid4().hex[:8]}"


class LeaseLock:
    """One resource's lock, as seen by one client."""

    def __init__(
        self,
        client: Client,
        resource: str,
        *,
        task_queue: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        wait_seconds: float = 5.0,
        acquire_timeout: Optional[float] = None,
        config: Optional[LeaseLockConfig] = None,
        unserved_after: float = UNSERVED_SECONDS,
    ) -> None:
        self.client = client
        self.unserved_after = unserved_after
        self.resource = resource
        self.task_queue = task_queue
        self.lease_seconds = lease_seconds
        self.wait_seconds = wait_seconds
        self.acquire_timeout = acquire_timeout
        self.config = config or LeaseLockConfig(resource=resource)
        self.workflow_id = lease_lock_workflow_id(resource)

    @classmethod
    def for_activity(cls, resource: str, **kwargs: Any) -> LeaseLock:
        """Inside an activity: its worker's client, and the lock workflow on its task queue."""
        kwargs.setdefault("task_queue", activity.info().task_queue)
        return cls(activity.client(), resource, **kwargs)

    # --- the three calls ------------------------------------------------------------------------

    async def acquire(self, holder: Optional[str] = None, fence: Optional[Fence] = None) -> Lease:
        """Wait (FIFO) until granted. Raises `LeaseError` if refused or past `acquire_timeout`."""
        holder = holder or default_holder()
        request = AcquireRequest(holder=holder, lease_seconds=self.lease_seconds,
                                 wait_seconds=self.wait_seconds,
                                 min_token=await _fence_highest(fence))
        give_up = None if self.acquire_timeout is None else time.monotonic() + self.acquire_timeout
        try:
            while True:
                sent = time.monotonic()
                grant = await self._call(self._acquire_once, request, give_up)
                if grant.status == LEASE_GRANTED:
                    lease = Lease(
                        resource=self.resource, holder=holder, token=grant.token,
                        lease_seconds=grant.lease_seconds, grant=grant, fence=fence,
                        deadline=sent + grant.lease_seconds,
                    )
                    if fence is not None:
                        await asyncio.to_thread(fence.admit, grant.token)
                    return lease
                if grant.status != LEASE_WAITING:
                    raise LeaseError(f"lock {self.resource} refused {holder}: {grant.status} "
                                     f"{grant.reason}".strip())
                if give_up is not None and time.monotonic() >= give_up:
                    raise LeaseError(f"lock {self.resource}: not granted to {holder} within "
                                     f"{self.acquire_timeout:g} s")
        except BaseException:
            # Gave up (timeout, cancelled, refused): leave the queue, or give back a late grant.
            await self._abandon(holder)
            raise

    async def try_acquire(self, holder: Optional[str] = None,
                          fence: Optional[Fence] = None) -> Optional[Lease]:
        """The lease if it is free right now (nobody holds or waits), else None at once."""
        holder = holder or default_holder()
        request = AcquireRequest(holder=holder, lease_seconds=self.lease_seconds, wait_seconds=0.0,
                                 min_token=await _fence_highest(fence))
        give_up = time.monotonic() + (self.acquire_timeout or 30.0)
        sent = time.monotonic()
        grant = await self._call(self._acquire_once, request, give_up)
        if grant.status == LEASE_GRANTED:
            lease = Lease(resource=self.resource, holder=holder, token=grant.token,
                          lease_seconds=grant.lease_seconds, grant=grant, fence=fence,
                          deadline=sent + grant.lease_seconds)
            if fence is not None:
                await asyncio.to_thread(fence.admit, grant.token)
            return lease
        if grant.status == LEASE_WAITING:
            await self._call(lambda ref: self._handle().execute_update(
                UPDATE_RELEASE, ref, result_type=LeaseGrant), LeaseRef(holder, 0), give_up)
            return None
        raise LeaseError(
            f"lock {self.resource} refused {holder}: {grant.status} {grant.reason}".strip())

    async def renew(self, lease: Lease) -> LeaseGrant:
        """One renewal; sets `lease.lost` when the lock says the lease is gone."""
        sent = time.monotonic()
        grant: LeaseGrant = await self._handle().execute_update(
            UPDATE_RENEW, LeaseRef(lease.holder, lease.token), result_type=LeaseGrant,
            rpc_timeout=timedelta(seconds=max(lease.lease_seconds, 1.0)),
        )
        if grant.status == LEASE_GRANTED:
            lease.deadline = sent + grant.lease_seconds
            lease.renewals += 1
        elif not lease.lost:
            lease.lost = grant.reason or grant.status
        return grant

    async def release(self, lease: Lease, wait: bool = True) -> None:
        """Give the lease back (best effort: else it expires). `wait=False` only signals
        `release_lease`, for a stopping worker that may no longer run the lock workflow itself."""
        ref = LeaseRef(lease.holder, lease.token)
        if not wait:
            try:
                await asyncio.wait_for(self._handle().signal(SIGNAL_RELEASE_LEASE, ref), 5)
            except Exception as err:  # noqa: BLE001 - the lease then expires
                log.warning("could not release %s (token %d); it expires in %g s: %s",
                            self.resource, lease.token, lease.lease_seconds,
                            root_cause_message(err))
            return
        try:
            await asyncio.wait_for(
                self._handle().execute_update(UPDATE_RELEASE, ref, result_type=LeaseGrant), 10)
        except BaseException as err:  # noqa: BLE001 - fall back to a signal, then to expiry
            try:
                await asyncio.wait_for(self._handle().signal(SIGNAL_RELEASE_LEASE, ref), 5)
            except BaseException:  # noqa: BLE001
                log.warning("could not release %s (token %d); it expires in %g s: %s",
                            self.resource, lease.token, lease.lease_seconds,
                            root_cause_message(err))
            if isinstance(err, asyncio.CancelledError):
                raise

    async def holders(self) -> LeaseLockStatus:
        return await self._handle().query(QUERY_HOLDERS, result_type=LeaseLockStatus)

    @asynccontextmanager
    async def hold(
        self, holder: Optional[str] = None, fence: Optional[Fence] = None, wait_release: bool = True
    ) -> AsyncIterator[Lease]:
        """Acquire, renew in the background, release in `finally`."""
        lease = await self.acquire(holder, fence)
        renewing = asyncio.create_task(self._keep_renewed(lease), name=f"renew {self.resource}")
        try:
            yield lease
        finally:
            renewing.cancel()
            try:
                await renewing
            except BaseException:  # noqa: BLE001 - the renewal task's end is not the caller's error
                pass
            await self.release(lease, wait=wait_release)

    # --- plumbing -------------------------------------------------------------------------------

    def _handle(self):
        return self.client.get_workflow_handle(self.workflow_id)

    async def _acquire_once(self, request: AcquireRequest) -> LeaseGrant:
        start = WithStartWorkflowOperation(
            LEASE_LOCK_WORKFLOW,
            self.config,
            id=self.workflow_id,
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"lock {self.resource}"[:200],
        )
        try:
            return await self.client.execute_update_with_start_workflow(
                UPDATE_ACQUIRE, request, start_workflow_operation=start, result_type=LeaseGrant
            )
        except BaseException:
            # the operation's future holds the same error: read it, so it is not logged as lost
            try:
                await asyncio.wait_for(start.workflow_handle(), 0.01)
            except BaseException:  # noqa: BLE001
                pass
            raise

    async def _call(self, fn, request, give_up: Optional[float]) -> LeaseGrant:
        """`fn(request)`, retrying what the network or a continue-as-new gap causes."""
        delay = 0.05
        while True:
            try:
                return await self._watched(fn(request))
            except _Moved:
                continue
            except WorkflowUpdateFailedError as err:
                raise LeaseError(f"lock {self.resource}: {root_cause_message(err)}") from None
            except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
                if _being_cancelled(err):
                    raise asyncio.CancelledError() from err
                if isinstance(err, RPCError) and err.status in _FINAL_CODES:
                    raise LeaseError(f"lock {self.resource}: {err.message}") from None
                if give_up is not None and time.monotonic() >= give_up:
                    raise LeaseError(
                        f"lock {self.resource} unreachable: {root_cause_message(err)}") from None
                log.info("lock %s: retrying after %s", self.resource, root_cause_message(err))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _watched(self, call: Awaitable[LeaseGrant]) -> LeaseGrant:
        """The call's answer, or `NoWorker` naming the queue no worker polls; a lock an older
        taskfleet started on its own queue is ended and asked again (fencing keeps that safe)."""
        task = asyncio.ensure_future(call)
        try:
            while not (await asyncio.wait({task}, timeout=WATCH_EVERY))[0]:
                stuck = await unserved(self.client, self.workflow_id, self.unserved_after)
                if stuck is None:
                    continue
                if stuck.task_queue != self.task_queue:
                    log.warning("lock %s: %s; ending it, to start again on task queue %s",
                                self.resource, stuck.describe(), self.task_queue)
                    await self._handle().terminate(
                        reason=f"taskfleet: no worker polls task queue '{stuck.task_queue}'; the "
                               f"lock starts again on '{self.task_queue}'")
                    raise _Moved()
                raise NoWorker(
                    f"lock {self.resource}: {stuck.describe()}; start a taskfleet worker (every "
                    f"taskfleet worker polls '{self.task_queue}', where taskfleet's locks run)")
            return task.result()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def _keep_renewed(self, lease: Lease) -> None:
        """Renew every third of the lease, retrying failures while it is held (`check()` guards the
        meantime); only the lock saying `lost` ends the lease."""
        period = max(lease.lease_seconds / 3, 0.1)
        failing = False
        while not lease.lost:
            await asyncio.sleep(period)
            try:
                grant = await self.renew(lease)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - retried; check() guards the meantime
                if _being_cancelled(err):
                    raise asyncio.CancelledError() from err
                gone = isinstance(err, RPCError) and err.status == RPCStatusCode.NOT_FOUND
                if gone and await self._history_gone(lease):
                    return
                if not failing and not gone:
                    log.warning("renewing %s (token %d) failed, retrying: %s", self.resource,
                                lease.token, root_cause_message(err))
                failing = True
                period = min(max(lease.lease_seconds / 10, 0.1), 1.0)
                continue
            failing = False
            if grant.status == LEASE_LOST:
                log.warning("lease on %s (token %d) lost: %s", self.resource,
                            lease.token, lease.lost)
                return
            if grant.status == LEASE_REJECTED:
                lease.lost = grant.reason
                return
            period = max(lease.lease_seconds / 3, 0.1)

    async def _history_gone(self, lease: Lease) -> bool:
        """The lock's workflow is gone (a server restarted, a lock terminated): a fenced lease is
        lost, an unfenced one (a presence) taken again. True when the lease ended."""
        if lease.fence is not None:
            lease.lost = f"the lock's workflow {self.workflow_id} is gone (a new lock history)"
            log.warning("lease on %s (token %d) lost: %s", self.resource, lease.token, lease.lost)
            return True
        request = AcquireRequest(holder=lease.holder, lease_seconds=lease.lease_seconds,
                                 wait_seconds=0.0)
        sent = time.monotonic()
        try:
            grant = await self._watched(self._acquire_once(request))
        except Exception as err:  # noqa: BLE001 - asked again at the next renewal
            log.info("lock %s is new; taking the lease again failed, retrying: %s", self.resource,
                     root_cause_message(err))
            return False
        if grant.status == LEASE_GRANTED:
            log.warning("lock %s started over (its workflow was gone): lease taken again, token %d",
                        self.resource, grant.token)
            lease.token, lease.grant, lease.deadline = (grant.token, grant,
                                                        sent + grant.lease_seconds)
        return False

    async def _abandon(self, holder: str) -> None:
        """Leave the queue (token 0), or release a lease granted after we stopped waiting."""
        try:
            status = await asyncio.wait_for(self.holders(), 5)
            ref = LeaseRef(holder, status.holder.token
                           if status.holder and status.holder.holder == holder else 0)
            await asyncio.wait_for(self._handle().signal(SIGNAL_RELEASE_LEASE, ref), 5)
        except BaseException:  # noqa: BLE001 - the queue drops a waiter that stops asking anyway
            pass
