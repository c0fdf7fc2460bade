"""`LLMBatchWorkflow`: one per namespace + task queue (id `taskfleet-llm-batch`); gathers the Claude
requests of every LLM task and sends each flush as ONE Message Batch: at the smallest queued
`llm_batch_max_size`, the API's limits or `llm_batch_max_age_seconds`. Polling on timers costs no
worker; results are signalled to each task by `custom_id`; params stay in the payload store."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta
from typing import Any, Optional

from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.llm_validation import InvalidSubmit, describe, parse_submit
    from taskfleet.core.models.llm import (
        REPLY_FAILED,
        BatchEntry,
        CreateBatchInput,
        CreateBatchOutput,
        DeliverResultsInput,
        DeliverResultsOutput,
        InFlightBatch,
        LLMBatchConfig,
        LLMBatchState,
        LLMBatchStatus,
        LLMReply,
        LLMRequest,
        PollBatchOutput,
        RejectedSubmit,
    )
    from taskfleet.core.models.payload import compact
    from taskfleet.core.names import (
        ACTIVITY_LLM_CREATE_BATCH,
        ACTIVITY_LLM_DELIVER_RESULTS,
        ACTIVITY_LLM_POLL_BATCH,
        LLM_BATCH_WORKFLOW,
        QUERY_STATUS,
        SIGNAL_FLUSH,
        SIGNAL_LLM_REPLY,
        SIGNAL_SUBMIT,
    )

from taskfleet.workflows.compat import (
    llm_batcher_continues_between_steps,
    llm_batcher_cuts_at_api_limits,
)
from taskfleet.workflows.long_lived import Inbox, continue_as_new_due, refuse, show

RECENT_BATCHES = 20
RECENT_REJECTIONS = 100
RECENT_IDS = 5_000
# Runs from before the payload store also cut a flush at this size (the server's payload limit).
FLUSH_BYTES = 1_500_000
# Continue-as-new carries pending requests only below this much history (else they are sent first).
CARRY_BYTES = 1_000_000
REF_BYTES = 300  # what a request by reference adds to history
MAX_STEP_FAILURES = 5
API_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                        maximum_interval=timedelta(seconds=60), maximum_attempts=8,
                        non_retryable_error_types=["AnthropicNotConfigured"])


def _config(raw: Any) -> LLMBatchConfig:
    """Tolerant: the start input may be typed by hand; anything unusable falls back to defaults."""
    if isinstance(raw, LLMBatchConfig):
        return raw
    config = LLMBatchConfig()
    if isinstance(raw, dict):
        for name in LLMBatchConfig.__dataclass_fields__:
            value = raw.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
                setattr(config, name, type(getattr(config, name))(value))
    config.poll_initial_seconds = max(config.poll_initial_seconds, 0.01)
    config.poll_max_seconds = max(config.poll_max_seconds, config.poll_initial_seconds)
    config.api_timeout_seconds = max(config.api_timeout_seconds, 5.0)
    config.max_requests = min(max(config.max_requests, 1), 100_000)
    config.max_bytes = max(config.max_bytes, 1)
    return config


def _size(request: LLMRequest) -> int:
    """The request's params, as the API counts a batch's bytes."""
    if request.params_ref is not None:
        return request.params_ref.size + 200
    return len(json.dumps(request.params)) + 200


def _history_size(request: LLMRequest) -> int:
    return REF_BYTES if request.params_ref is not None else _size(request)


# Worker Versioning: AUTO_UPGRADE: pinned, an entity that continues as new forever would never let
# its version drain; its state travels as data, new commands go behind `workflow.patched`.
@workflow.defn(name=LLM_BATCH_WORKFLOW, versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class LLMBatchWorkflow:
    @workflow.init
    def __init__(self, config: Any = None, state: Optional[LLMBatchState] = None) -> None:
        self.config = _config(config)
        self.s = state if isinstance(state, LLMBatchState) else LLMBatchState()
        # Requests are held by reference (their params are in the payload store): ids only.
        self._inbox = Inbox(self.s, RECENT_IDS, CARRY_BYTES, "requests")
        self._creating = ""
        self._wake = False
        self._wait_until: Optional[datetime] = None
        self._api_limits = False

    # --- run loop --------------------------------------------------------------------------------

    @workflow.run
    async def run(self, config: Any = None, state: Optional[LLMBatchState] = None) -> None:
        workflow.logger.info("LLM batcher run %d: %d pending, %d in flight", self.s.runs,
                             len(self.s.pending), len(self.s.in_flight))
        self._api_limits = llm_batcher_cuts_at_api_limits()
        self._refresh_details()
        while True:
            # The timeout is fixed when the wait starts: `submit` sets `_wake` for an earlier one.
            self._wake = False
            timeout = self._until_next()
            self._wait_until = workflow.now() + timeout if timeout is not None else None
            try:
                await workflow.wait_condition(lambda: self._wake or self._flush_due()
                                              or self._poll_due() or self._should_continue_as_new(),
                                              timeout=timeout)
            except asyncio.TimeoutError:
                pass
            # Pending requests too big to carry are flushed even then (see below).
            while self._flush_due() and not (self._continue_now() and self._carryable()):
                await self._flush()
            for batch in [b for b in self.s.in_flight if b.batch_id and self._due(b.next_poll_at)]:
                if self._continue_now():
                    break  # the rest are polled by the next run: in-flight batches are carried
                await self._poll(batch)
            if self._should_continue_as_new():
                if not self._carryable():
                    self.s.flush_requested = True  # too much to carry: send it first
                    continue
                await workflow.wait_condition(workflow.all_handlers_finished)
                self.s.runs += 1
                self.s.recent_ids = self.s.recent_ids[-RECENT_IDS:]
                workflow.logger.info("continuing as new: %d pending, %d in flight",
                                     len(self.s.pending), len(self.s.in_flight))
                workflow.continue_as_new(args=[self.config, self.s])

    def _carryable(self) -> bool:
        return sum(map(_history_size, self.s.pending)) <= CARRY_BYTES

    def _continue_now(self) -> bool:
        """Stop between flushes or polls once continue-as-new is due: a run stays within a few
        events of the server's suggestion (runs recorded before this finished the loop first)."""
        return self._should_continue_as_new() and llm_batcher_continues_between_steps()

    def _should_continue_as_new(self) -> bool:
        return continue_as_new_due(self.config.max_history_events)

    def _due(self, at: str) -> bool:
        return not at or datetime.fromisoformat(at) <= workflow.now()

    def _poll_due(self) -> bool:
        return any(b.batch_id and self._due(b.next_poll_at) for b in self.s.in_flight)

    def _flush_deadline(self) -> Optional[datetime]:
        if not self.s.pending:
            return None
        return min(datetime.fromisoformat(r.enqueued_at)
                   + timedelta(seconds=r.max_batch_age_seconds) for r in self.s.pending)

    def _limits(self) -> tuple[int, int]:
        """How many requests and bytes one batch takes: the API's limits (configurable), or for a
        run from before the payload store, the requests' own size rule and a history byte cut."""
        size = min(r.max_batch_size for r in self.s.pending)
        if self._api_limits:
            return min(size, self.config.max_requests), self.config.max_bytes
        return size, FLUSH_BYTES

    def _flush_due(self) -> bool:
        if not self.s.pending:
            return False
        requests, limit = self._limits()
        if self.s.flush_requested or len(self.s.pending) >= requests:
            return True
        if self._api_limits and sum(map(_size, self.s.pending)) >= limit:
            return True
        deadline = self._flush_deadline()
        return deadline is not None and deadline <= workflow.now()

    def _until_next(self) -> Optional[timedelta]:
        moments = [datetime.fromisoformat(b.next_poll_at)
                   for b in self.s.in_flight if b.batch_id and b.next_poll_at]
        deadline = self._flush_deadline()
        if deadline is not None:
            moments.append(deadline)
        if not moments:
            return None
        return max(min(moments) - workflow.now(), timedelta(milliseconds=1))

    # --- flush: one batch create ------------------------------------------------------------------

    async def _flush(self) -> None:
        limit, max_bytes = self._limits()
        taken: list[LLMRequest] = []
        size = 0
        for request in self.s.pending:
            if len(taken) >= limit or (taken and size + _size(request) > max_bytes):
                break
            taken.append(request)
            size += _size(request)
        self.s.pending = self.s.pending[len(taken):]
        if not self.s.pending:
            self.s.flush_requested = False
        batch = InFlightBatch(
            flush_id=f"flush-{self.s.next_flush}", custom_ids=[r.custom_id for r in taken],
            reply_to=[r.reply_to for r in taken], cut_at=workflow.now().isoformat(),
            next_poll_seconds=self.config.poll_initial_seconds,
        )
        self.s.next_flush += 1
        self.s.in_flight.append(batch)
        await self._create(batch, taken)

    async def _create(self, batch: InFlightBatch, requests: list[LLMRequest]) -> None:
        self._creating = batch.flush_id
        self._refresh_details()
        known = [b.batch_id for b in self.s.in_flight + self.s.recent_batches if b.batch_id]
        inline = [{"custom_id": r.custom_id, "params": r.params}
                  for r in requests if r.params_ref is None]
        entries = [BatchEntry(custom_id=r.custom_id, params=r.params_ref)
                   for r in requests if r.params_ref]
        try:
            out: CreateBatchOutput = await workflow.execute_activity(
                ACTIVITY_LLM_CREATE_BATCH,
                CreateBatchInput(flush_id=batch.flush_id, requests=inline, cut_at=batch.cut_at,
                                 known_batch_ids=known, entries=entries),
                result_type=CreateBatchOutput,
                start_to_close_timeout=timedelta(seconds=self.config.api_timeout_seconds),
                retry_policy=API_RETRY,
                summary=f"messages.batches.create: {len(requests)} request(s) ({batch.flush_id})",
            )
        except ActivityError as err:
            message = root_cause_message(err)
            workflow.logger.warning("%s: batch create failed: %s", batch.flush_id, message)
            self._drop(batch, message)
            await self._tell_failed(batch, f"messages.batches.create failed: {message}")
            return
        finally:
            self._creating = ""
        if out.left_out:
            await self._leave_out(batch, out.left_out)
        if not out.batch_id:
            self._drop(batch, "no request of the flush could be read from the payload store")
            return
        batch.batch_id = out.batch_id
        batch.created_at = workflow.now().isoformat()
        batch.next_poll_at = (
            workflow.now() + timedelta(seconds=batch.next_poll_seconds)).isoformat()
        self.s.stats.batches_created += 1
        self.s.stats.batches_recovered += int(out.recovered)
        self._refresh_details()

    async def _leave_out(self, batch: InFlightBatch, left_out: dict[str, str]) -> None:
        """Requests whose params could not be read: their tasks hear why; the rest go on."""
        routes = list(zip(batch.custom_ids, batch.reply_to))
        batch.custom_ids = [c for c, _ in routes if c not in left_out]
        batch.reply_to = [r for c, r in routes if c not in left_out]
        workflow.logger.warning("%s: %d request(s) left out", batch.flush_id, len(left_out))
        for custom_id, listener in routes:
            if custom_id in left_out:
                why = f"left out of {batch.flush_id}: {left_out[custom_id]}"
                await self._tell(custom_id, listener, why, "")

    async def _tell_failed(self, batch: InFlightBatch, error: str) -> None:
        for custom_id, listener in zip(batch.custom_ids, batch.reply_to):
            await self._tell(custom_id, listener, error, batch.batch_id)

    async def _tell(self, custom_id: str, listener: str, error: str, batch_id: str) -> None:
        reply = LLMReply(custom_id=custom_id, type=REPLY_FAILED, error=error[:500],
                         batch_id=batch_id)
        try:
            handle = workflow.get_external_workflow_handle(listener)
            await handle.signal(SIGNAL_LLM_REPLY, compact(reply))
        except Exception as err:  # noqa: BLE001 - a vanished task is not our failure
            workflow.logger.warning("could not tell %s: %s", listener, err)

    # --- polling and results ----------------------------------------------------------------------

    async def _poll(self, batch: InFlightBatch) -> None:
        batch.polls += 1
        self.s.stats.polls += 1
        try:
            polled: PollBatchOutput = await workflow.execute_activity(
                ACTIVITY_LLM_POLL_BATCH, batch.batch_id, result_type=PollBatchOutput,
                start_to_close_timeout=timedelta(seconds=self.config.api_timeout_seconds),
                retry_policy=API_RETRY, summary=f"messages.batches.retrieve {batch.batch_id}")
        except ActivityError as err:
            await self._failed_step(batch,
                                    f"polling {batch.batch_id} failed: {root_cause_message(err)}")
            return
        batch.failures = 0
        batch.processing_status, batch.request_counts = (polled.processing_status,
                                                         polled.request_counts)
        if polled.processing_status != "ended":
            self._schedule_poll(batch)
            self._refresh_details()
            return
        try:
            delivered: DeliverResultsOutput = await workflow.execute_activity(
                ACTIVITY_LLM_DELIVER_RESULTS,
                DeliverResultsInput(batch_id=batch.batch_id, custom_ids=batch.custom_ids,
                                    reply_to=batch.reply_to),
                result_type=DeliverResultsOutput,
                start_to_close_timeout=timedelta(seconds=self.config.api_timeout_seconds * 5),
                heartbeat_timeout=timedelta(seconds=self.config.api_timeout_seconds),
                retry_policy=API_RETRY,
                summary=f"results of {batch.batch_id}: {len(batch.custom_ids)} request(s)",
            )
        except ActivityError as err:
            await self._failed_step(
                batch, f"reading results of {batch.batch_id} failed: {root_cause_message(err)}")
            return
        self.s.stats.results_delivered += delivered.delivered
        self.s.stats.unknown_results += len(delivered.unknown)
        if delivered.unknown:
            workflow.logger.warning("%s: dropped results for unknown custom_id(s) %s",
                                    batch.batch_id, ", ".join(delivered.unknown[:10]))
        batch.ended_at = workflow.now().isoformat()
        self._drop(batch, "")

    async def _failed_step(self, batch: InFlightBatch, error: str) -> None:
        """Each step already retried; after a few such failures in a row, give the batch up and let
        its tasks know (their next attempt, if any, is a new request)."""
        batch.failures += 1
        workflow.logger.warning("%s (%d in a row)", error, batch.failures)
        if batch.failures < MAX_STEP_FAILURES:
            self._schedule_poll(batch)
            return
        self._drop(batch, error)
        await self._tell_failed(batch, error)

    def _schedule_poll(self, batch: InFlightBatch) -> None:
        batch.next_poll_seconds = min(batch.next_poll_seconds * 2, self.config.poll_max_seconds)
        batch.next_poll_at = (
            workflow.now() + timedelta(seconds=batch.next_poll_seconds)).isoformat()

    def _drop(self, batch: InFlightBatch, error: str) -> None:
        if batch in self.s.in_flight:
            self.s.in_flight.remove(batch)
        if error:
            batch.processing_status = f"failed: {error}"[:300]
        self.s.recent_batches = (self.s.recent_batches + [batch])[-RECENT_BATCHES:]
        self._refresh_details()

    # --- messages --------------------------------------------------------------------------------

    @workflow.signal(name=SIGNAL_SUBMIT)
    def submit(self, *args: Any) -> None:
        """Queue one request. Takes any input and never raises: a bad one is kept (bounded) under
        `rejected` in `status`; a custom_id seen before is ignored."""
        try:
            try:
                request = parse_submit(args)
            except InvalidSubmit as err:
                self._reject(args, str(err))
                return
            if self._inbox.knows(request.custom_id):
                self.s.stats.duplicates += 1
                workflow.logger.info("request %s already submitted; ignoring the repeat",
                                     request.custom_id)
                return
            self._inbox.remember(request.custom_id)
            request.enqueued_at = workflow.now().isoformat()
            self.s.pending.append(request)
            self.s.stats.submitted += 1
            due = workflow.now() + timedelta(seconds=request.max_batch_age_seconds)
            if self._wait_until is None or due < self._wait_until:
                self._wake = True  # this request is due before the running wait would end
            self._refresh_details()
        except Exception as err:  # noqa: BLE001 - an escaping exception would wedge the workflow
            self._reject(args, f"unreadable request ({type(err).__name__})")

    @workflow.signal(name=SIGNAL_FLUSH)
    def flush(self, *args: Any) -> None:
        """Send what is queued now rather than at its age."""
        self.s.flush_requested = True
        self._wake = True

    def _reject(self, args: tuple[Any, ...], reason: str) -> None:
        self.s.stats.rejected += 1
        self.s.rejected = refuse(
            self.s.rejected, RECENT_REJECTIONS, SIGNAL_SUBMIT, args, reason,
            lambda _, what, why, at: RejectedSubmit(what=describe(what), reason=why, at=at), 300)

    @workflow.query(name=QUERY_STATUS)
    def status(self) -> LLMBatchStatus:
        return LLMBatchStatus(
            pending=[r.custom_id for r in self.s.pending], in_flight=self.s.in_flight,
            recent_batches=self.s.recent_batches, rejected=self.s.rejected, stats=self.s.stats,
            config=self.config, runs=self.s.runs,
        )

    def _refresh_details(self) -> None:
        st = self.s.stats
        lines = [f"- pending: {len(self.s.pending)}"
                 + (f" (creating {self._creating})" if self._creating else ""),
                 f"- in flight: {len(self.s.in_flight)} batch(es)"]
        for b in self.s.in_flight[:5]:
            lines.append(f"  - `{b.batch_id or b.flush_id}`: {len(b.custom_ids)} request(s), "
                         f"{b.processing_status or 'creating'}, {b.polls} poll(s)")
        lines.append(f"- batches created: {st.batches_created} (recovered {st.batches_recovered}), "
                     f"requests: {st.submitted}, results delivered: {st.results_delivered}")
        lines.append(f"- duplicates ignored: {st.duplicates}, rejected: {st.rejected}, unknown "
                     f"results: {st.unknown_results}")
        show("**Claude requests → Message Batches**", lines)
