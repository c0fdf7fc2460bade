"""`LeaseLockWorkflow`: a Temporal-native lock, one entity workflow per guarded resource: pods on
different hosts share no kernel lock, but all reach the server. Holder, FIFO and next token live
in workflow state; a lease ends on release or missed renewal, and grants carry rising fencing
tokens. Handlers validate raw arguments and never raise out (bad signals kept under `rejected`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Optional

from temporalio import workflow
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ApplicationError

from taskfleet.workflows.long_lived import continue_as_new_due, parse_start, refuse, show

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.lease_lock import (
        InvalidLeaseMessage,
        parse_acquire,
        parse_config,
        parse_lease_ref,
    )
    from taskfleet.core.models.lease_lock import (
        LEASE_GRANTED,
        LEASE_LOST,
        LEASE_NOT_HELD,
        LEASE_REJECTED,
        LEASE_RELEASED,
        LEASE_WAITING,
        AcquireRequest,
        LeaseGrant,
        LeaseHolder,
        LeaseLockConfig,
        LeaseLockState,
        LeaseLockStatus,
        LeaseRef,
        LeaseWaiter,
        RejectedMessage,
        describe,
    )
    from taskfleet.core.names import (
        LEASE_LOCK_WORKFLOW,
        QUERY_HOLDERS,
        SIGNAL_RELEASE_LEASE,
        SIGNAL_RENEW_LEASE,
        UPDATE_ACQUIRE,
        UPDATE_RELEASE,
        UPDATE_RENEW,
    )

RECENT_REJECTIONS = 20
DETAIL_WAITERS = 10


def _at(iso: str) -> datetime:
    return datetime.fromisoformat(iso)


def _refused(err: Exception) -> ApplicationError:
    return ApplicationError(str(err), type="InvalidLeaseMessage", non_retryable=True)


# Worker Versioning: AUTO_UPGRADE. A lock never ends (it continues as new), so pinned it would hold
# its first version forever; all it carries across runs is data (LeaseLockState).
@workflow.defn(name=LEASE_LOCK_WORKFLOW, versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class LeaseLockWorkflow:
    @workflow.init
    def __init__(self, config: Any, state: Any = None) -> None:
        # Parsed in code, not by the data converter: a bad start input must fail this run clearly,
        # not wedge its first workflow task.
        self.config, self.s, self._config_error = parse_start(
            config, state, parse_config, lambda: LeaseLockConfig(resource="?"), LeaseLockState,
            InvalidLeaseMessage)
        # acquire calls waiting in this run, per holder (a waiter with none is on its grace time)
        self._polls: dict[str, int] = {}
        self._draining = False  # continue-as-new is due: waiting calls answer `waiting`
        self._armed: Optional[datetime] = None  # the deadline the run loop's timer is set for
        self._rearm = False

    # --- run loop: only timers (lease expiry, dead waiters) and continue-as-new -----------------

    @workflow.run
    async def run(self, config: Any, state: Any = None) -> None:
        if self._config_error:
            raise ApplicationError(f"bad LeaseLockWorkflow start input: {self._config_error}",
                                   non_retryable=True)
        self._tick()
        self._refresh_details()
        while True:
            deadline = self._next_deadline()
            self._armed = deadline
            timeout = None
            if deadline is not None:
                timeout = timedelta(
                    seconds=max((deadline - workflow.now()).total_seconds(), 0.0) + 0.005)
            try:
                await workflow.wait_condition(lambda: self._rearm or continue_as_new_due(
                    self.config.max_history_events), timeout=timeout)
            except asyncio.TimeoutError:
                pass
            self._rearm = False
            self._tick()
            if self._idle_long_enough():
                # Every handler has returned and nobody came back meanwhile: the resource is done.
                await workflow.wait_condition(workflow.all_handlers_finished)
                if self._idle_long_enough():
                    workflow.logger.info("lock %s idle: closing", self.config.resource)
                    return
            if continue_as_new_due(self.config.max_history_events):
                # Waiting calls answer `waiting` (their place is carried) and ask the next run;
                # every handler has returned before we hand over.
                self._draining = True
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._tick()
                self.s.runs += 1
                workflow.logger.info(
                    "lock %s continuing as new: holder %s, %d waiters, next token %d",
                    self.config.resource,
                    self.s.holder.holder if self.s.holder else "none",
                    len(self.s.waiters),
                    self.s.next_token,
                )
                workflow.continue_as_new(args=[self.config, self.s])

    def _idle_long_enough(self) -> bool:
        limit = self.config.close_after_idle_seconds
        if (not limit or self.s.holder is not None or self.s.waiters or self._polls
                or not self.s.idle_since):
            return False
        return workflow.now() >= _at(self.s.idle_since) + timedelta(seconds=limit)

    def _next_deadline(self) -> Optional[datetime]:
        """The earliest moment something changes by itself: the lease ends, an idle waiter is
        dropped, or the idle lock closes."""
        moments = []
        if (self.config.close_after_idle_seconds and self.s.idle_since and self.s.holder is None
                and not self.s.waiters):
            moments.append(
                _at(self.s.idle_since) + timedelta(seconds=self.config.close_after_idle_seconds))
        if self.s.holder is not None:
            moments.append(_at(self.s.holder.expires_at))
        grace = timedelta(seconds=self.config.waiter_grace_seconds)
        for waiter in self.s.waiters:
            if not self._polls.get(waiter.holder):
                moments.append(_at(waiter.last_seen) + grace)
        return min(moments) if moments else None

    def _wake_if_sooner(self) -> None:
        deadline = self._next_deadline()
        if deadline is not None and (self._armed is None or deadline < self._armed):
            self._rearm = True

    # --- state changes --------------------------------------------------------------------------

    def _tick(self) -> None:
        """Expire the lease if its time is up, drop waiters that stopped asking, grant the next."""
        now = workflow.now()
        changed = False
        holder = self.s.holder
        if holder is not None and now >= _at(holder.expires_at):
            workflow.logger.warning(
                "lease of %s on %s (token %d) expired: no renewal since %s",
                holder.holder, self.config.resource, holder.token, holder.expires_at,
            )
            self.s.stats.expirations += 1
            self.s.holder = None
            changed = True
        grace = timedelta(seconds=self.config.waiter_grace_seconds)
        alive = [
            w for w in self.s.waiters if self._polls.get(w.holder) or now < _at(w.last_seen) + grace
        ]
        if len(alive) != len(self.s.waiters):
            self.s.stats.dropped_waiters += len(self.s.waiters) - len(alive)
            self.s.waiters = alive
            changed = True
        if self.s.holder is None and self.s.waiters:
            self._grant(self.s.waiters.pop(0))
            changed = True
        idle = self.s.holder is None and not self.s.waiters
        if idle and not self.s.idle_since:
            self.s.idle_since = now.isoformat()
            changed = True
        elif not idle and self.s.idle_since:
            self.s.idle_since = ""
        if changed:
            self._wake_if_sooner()
            self._refresh_details()

    def _grant(self, waiter: LeaseWaiter) -> None:
        now = workflow.now()
        self.s.holder = LeaseHolder(
            holder=waiter.holder,
            token=self.s.next_token,
            since=now.isoformat(),
            expires_at=(now + timedelta(seconds=waiter.lease_seconds)).isoformat(),
            lease_seconds=waiter.lease_seconds,
        )
        self.s.next_token += 1
        self.s.stats.grants += 1

    def _answer(self, status: str, holder: str, reason: str = "") -> LeaseGrant:
        h = self.s.holder
        if status == LEASE_GRANTED and h is not None and h.holder == holder:
            return LeaseGrant(
                status=status, resource=self.config.resource, holder=holder, token=h.token,
                since=h.since, expires_at=h.expires_at, lease_seconds=h.lease_seconds,
            )
        position = next((i + 1 for i, w in enumerate(self.s.waiters) if w.holder == holder), 0)
        return LeaseGrant(status=status, resource=self.config.resource, holder=holder,
                          position=position, reason=reason)

    def _waiter(self, holder: str) -> Optional[LeaseWaiter]:
        return next((w for w in self.s.waiters if w.holder == holder), None)

    def _holds(self, holder: str) -> bool:
        return self.s.holder is not None and self.s.holder.holder == holder

    def _reject(self, handler: str, args: Any, reason: str) -> None:
        self.s.stats.rejected += 1
        self.s.rejected = refuse(self.s.rejected, RECENT_REJECTIONS,
                                 f"lock {self.config.resource}: {handler}",
                                 args if isinstance(args, tuple) else (args,), reason,
                                 lambda _, what, why, at: RejectedMessage(handler, describe(what),
                                                                          why, at), 300)
        self._refresh_details()

    # --- acquire --------------------------------------------------------------------------------

    @workflow.update(name=UPDATE_ACQUIRE)
    async def acquire(self, *args: Any) -> LeaseGrant:
        """An update, not a signal: the caller waits here for its turn (FIFO) up to `wait_seconds`,
        then gets `waiting` and its place, kept by asking again."""
        try:
            return await self._acquire(parse_acquire(args))
        except InvalidLeaseMessage as err:  # the validator refused it already; kept for safety
            return LeaseGrant(status=LEASE_REJECTED, resource=self.config.resource, reason=str(err))
        except Exception as err:  # noqa: BLE001 - raised out of a handler, it would wedge the lock
            return self._failed(UPDATE_ACQUIRE, args, err)

    def _failed(self, handler: str, args: Any, err: Exception) -> LeaseGrant:
        reason = f"{type(err).__name__}: {err}"
        self._reject(handler, args, reason)
        return LeaseGrant(status=LEASE_REJECTED, resource=self.config.resource, reason=reason[:300])

    async def _acquire(self, request: AcquireRequest) -> LeaseGrant:
        holder = request.holder
        self._polls[holder] = self._polls.get(holder, 0) + 1
        try:
            self._enqueue(request)
            if not self._holds(holder) and request.wait_seconds > 0 and not self._draining:
                try:
                    await workflow.wait_condition(lambda: self._holds(holder) or self._draining
                                                  or self._waiter(holder) is None,
                                                  timeout=timedelta(seconds=request.wait_seconds))
                except asyncio.TimeoutError:
                    pass
        finally:
            self._polls[holder] -= 1
            if not self._polls[holder]:
                del self._polls[holder]
            waiter = self._waiter(holder)
            if waiter is not None:
                waiter.last_seen = workflow.now().isoformat()
                self._wake_if_sooner()
        if self._holds(holder):
            return self._answer(LEASE_GRANTED, holder)
        if self._waiter(holder) is not None:
            return self._answer(LEASE_WAITING, holder)
        return self._answer(LEASE_RELEASED, holder,
                            reason="your place in the queue was given up (release)")

    def _enqueue(self, request: AcquireRequest) -> None:
        # A fence has seen tokens up to `min_token` (an earlier history of this lock, say): grant
        # above it.
        if request.min_token >= self.s.next_token:
            workflow.logger.info(
                "lock %s: tokens continue above %d, the highest its fence has seen",
                self.config.resource, request.min_token)
            self.s.next_token = request.min_token + 1
        self._tick()
        if self._holds(request.holder):
            return
        now = workflow.now().isoformat()
        waiter = self._waiter(request.holder)
        if waiter is None:
            self.s.waiters.append(
                LeaseWaiter(request.holder, request.lease_seconds, queued_at=now, last_seen=now))
        else:
            waiter.lease_seconds = request.lease_seconds
            waiter.last_seen = now
        self._tick()
        self._refresh_details()

    @acquire.validator
    def _validate_acquire(self, *args: Any) -> None:
        try:
            request = parse_acquire(args)
        except InvalidLeaseMessage as err:
            raise _refused(err) from None
        known = self._holds(request.holder) or self._waiter(request.holder) is not None
        if not known and len(self.s.waiters) >= self.config.max_waiters:
            raise ApplicationError(f"lock {self.config.resource} has {len(self.s.waiters)} waiters "
                                   f"already (max {self.config.max_waiters})",
                                   type="TooManyWaiters", non_retryable=True)

    # --- renew ----------------------------------------------------------------------------------

    def _renew(self, ref: LeaseRef) -> LeaseGrant:
        # Not `_tick()` first: a late renewal (a delayed workflow task) still counts while nobody
        # else was granted; messages run before timers, and grants to others happen only in a tick.
        h = self.s.holder
        if h is None or h.holder != ref.holder or h.token != ref.token:
            self._tick()
            h = self.s.holder
            now_held = f"held by {h.holder} with token {h.token}" if h else "free"
            return LeaseGrant(status=LEASE_LOST, resource=self.config.resource, holder=ref.holder,
                              token=ref.token, reason=f"token {ref.token} of {ref.holder} is not "
                                                      f"the current lease (the lock is {now_held})")
        seconds = ref.lease_seconds or h.lease_seconds
        h.expires_at = (workflow.now() + timedelta(seconds=seconds)).isoformat()
        h.lease_seconds = seconds
        h.renewals += 1
        self.s.stats.renewals += 1
        self._tick()
        self._refresh_details()
        return self._answer(LEASE_GRANTED, ref.holder)

    # --- renew and release: an update and a signal each, all guarded the same way ----------------

    def _as_update(self, name: str, args: Any, act: Callable[[LeaseRef], LeaseGrant]) -> LeaseGrant:
        """An update's answer: a bad message is a `rejected` grant, never an exception."""
        try:
            return act(parse_lease_ref(args, name))
        except InvalidLeaseMessage as err:
            return LeaseGrant(status=LEASE_REJECTED, resource=self.config.resource, reason=str(err))
        except Exception as err:  # noqa: BLE001 - raised out of a handler, it would wedge the lock
            return self._failed(name, args, err)

    def _as_signal(self, name: str, args: Any,
                   act: Callable[[LeaseRef], LeaseGrant]) -> Optional[LeaseGrant]:
        """A signal's effect: a bad message is kept under `rejected` (a signal has no answer)."""
        try:
            return act(parse_lease_ref(args, name))
        except InvalidLeaseMessage as err:
            self._reject(name, args, str(err))
        except Exception as err:  # noqa: BLE001 - nothing escapes a signal handler
            self._reject(name, args, f"{type(err).__name__}: {err}")
        return None

    @staticmethod
    def _validate_ref(args: Any, name: str) -> None:
        try:
            parse_lease_ref(args, name)
        except InvalidLeaseMessage as err:
            raise _refused(err) from None

    @workflow.update(name=UPDATE_RENEW)
    def renew(self, *args: Any) -> LeaseGrant:
        """Extend the lease `lease_seconds` from now; `lost` when this token no longer holds it."""
        return self._as_update(UPDATE_RENEW, args, self._renew)

    @renew.validator
    def _validate_renew(self, *args: Any) -> None:
        self._validate_ref(args, UPDATE_RENEW)

    @workflow.signal(name=SIGNAL_RENEW_LEASE)
    def renew_lease(self, *args: Any) -> None:
        grant = self._as_signal(SIGNAL_RENEW_LEASE, args, self._renew)
        if grant is not None and grant.status == LEASE_LOST:
            workflow.logger.info("renew_lease: %s", grant.reason)

    # --- release --------------------------------------------------------------------------------

    def _release(self, ref: LeaseRef) -> LeaseGrant:
        self._tick()
        h = self.s.holder
        if h is not None and h.holder == ref.holder and h.token == ref.token:
            self.s.holder = None
            self.s.stats.releases += 1
            self._tick()  # the next waiter gets it now
            self._refresh_details()
            return LeaseGrant(status=LEASE_RELEASED, resource=self.config.resource,
                              holder=ref.holder, token=ref.token)
        waiter = self._waiter(ref.holder)
        if waiter is not None and not ref.token:
            self.s.waiters.remove(waiter)
            self._tick()
            self._refresh_details()
            return LeaseGrant(status=LEASE_RELEASED, resource=self.config.resource,
                              holder=ref.holder)
        return LeaseGrant(status=LEASE_NOT_HELD, resource=self.config.resource, holder=ref.holder,
                          token=ref.token,
                          reason=f"{ref.holder} holds no lease with token {ref.token} here")

    @workflow.update(name=UPDATE_RELEASE)
    def release(self, *args: Any) -> LeaseGrant:
        """Give the lease (token > 0) or a queue place (token 0) back; the next waiter gets it."""
        return self._as_update(UPDATE_RELEASE, args, self._release)

    @release.validator
    def _validate_release(self, *args: Any) -> None:
        self._validate_ref(args, UPDATE_RELEASE)

    @workflow.signal(name=SIGNAL_RELEASE_LEASE)
    def release_lease(self, *args: Any) -> None:
        """For a caller that cannot wait for an answer (a `finally` while its task is cancelled)."""
        self._as_signal(SIGNAL_RELEASE_LEASE, args, self._release)

    # --- what people see ------------------------------------------------------------------------

    @workflow.query(name=QUERY_HOLDERS)
    def holders(self) -> LeaseLockStatus:
        return LeaseLockStatus(
            resource=self.config.resource,
            holder=self.s.holder,
            waiters=self.s.waiters,
            next_token=self.s.next_token,
            stats=self.s.stats,
            rejected=self.s.rejected,
            runs=self.s.runs,
            now=workflow.now().isoformat(),
        )

    def _refresh_details(self) -> None:
        h = self.s.holder
        lines = []
        if h is None:
            lines.append("- free")
        else:
            lines.append(
                f"- held by `{h.holder}`, token {h.token}, since {h.since}, expires {h.expires_at}")
        lines.append(f"- waiters: {len(self.s.waiters)}")
        for i, w in enumerate(self.s.waiters[:DETAIL_WAITERS]):
            lines.append(f"  {i + 1}. `{w.holder}` (queued {w.queued_at})")
        if len(self.s.waiters) > DETAIL_WAITERS:
            lines.append(f"  ... and {len(self.s.waiters) - DETAIL_WAITERS} more")
        st = self.s.stats
        lines.append(
            f"- grants {st.grants}, releases {st.releases}, expired {st.expirations}, "
            f"renewals {st.renewals}, rejected {st.rejected}; next token {self.s.next_token}"
        )
        show(f"**lock** `{self.config.resource}`", lines)
