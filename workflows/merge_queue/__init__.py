"""`MergeQueueWorkflow`: one per (clone, remote, target branch); keeps the target green.

Entries (a branch and the commit it must be at) arrive by signal `enqueue` or update `submit`, from
a board's tasks (`land = "queue"`) or any client. A batch starts when the window is full, when the
oldest entry has waited `max_wait_seconds`, or on `flush`, and while verify slots are free: up to
`parallel` batches are verified at once, each stacked on the one ahead. What a result means is in
workflows/merge_queue/train.py, how the activities run in workflows/merge_queue/steps.py (runs
started before speculation: workflows/merge_queue/one_at_a_time.py), what each entry is told in
workflows/merge_queue/outcomes.py. The queue lives in workflow state: an accepted entry survives
worker crashes, server restarts and continue-as-new until it is answered.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Optional

from temporalio import workflow
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ApplicationError

from taskfleet.workflows import compat
from taskfleet.workflows.intake import ids_to_carry, parse_state, refusal, remember_id, should_continue_as_new
from taskfleet.workflows.merge_queue.one_at_a_time import BatchesMixin
from taskfleet.workflows.merge_queue.outcomes import OutcomesMixin
from taskfleet.workflows.merge_queue.steps import StepsMixin, stage_line
from taskfleet.workflows.merge_queue.train import Train

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.bounded import args_problem, clip, json_size
    from taskfleet.core.models.lessons import Lesson
    from taskfleet.core.models.merge_queue import (
        LANE_ISOLATE,
        LANE_TRAIN,
        EntryOutcome,
        MergeQueueConfig,
        MergeQueueState,
        MergeQueueStats,
        MergeQueueStatus,
        QueueBatch,
        QueueEntry,
    )
    from taskfleet.core.merge_queue_validation import InvalidQueueEntry, parse_entry, parse_queue_config
    from taskfleet.core.names import (
        MERGE_QUEUE_WORKFLOW,
        QUERY_STATS,
        QUERY_STATUS,
        SIGNAL_ENQUEUE,
        SIGNAL_FLUSH,
        UPDATE_SUBMIT,
    )
    from taskfleet.core.store_refs import queue_ref

RECENT_REJECTIONS = 50
RECENT_IDS = 5_000
# What one run may carry into the next stays far under the server's 2 MB payload limit: accepted
# entries still unanswered (queued or in halves) up to HELD_BYTES (new entries are refused past it,
# never dropped once accepted; an entry is at most 16 KiB), plus bounded recent outcomes, refusal
# previews and ids. A task's entry is ~400 bytes: about 1,900 fit.
HELD_BYTES = 768 * 1024
CARRIED_RECENT = 20
CARRIED_TAIL = 500
CARRIED_REJECTED_BYTES = 64 * 1024
CARRIED_IDS_BYTES = 96 * 1024
REASON_CHARS = 500


# Worker Versioning: AUTO_UPGRADE, as the git batcher: a queue never ends (it continues as new), so
# pinned it would hold its first version forever; its state travels as data, and any new command
# is guarded with `workflow.patched` (workflows/compat.py).
@workflow.defn(name=MERGE_QUEUE_WORKFLOW, versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class MergeQueueWorkflow(StepsMixin, BatchesMixin, OutcomesMixin):
    @workflow.init
    def __init__(self, config: Any, state: Any = None) -> None:
        # Raw JSON in, parsed here: a bad start input fails the workflow with a message instead of
        # failing its first task forever (as the data converter would).
        self._config_error = ""
        try:
            self.config = parse_queue_config(config)
        except InvalidQueueEntry as err:
            self._config_error = str(err)
            self.config = MergeQueueConfig(repo="", target="")
        try:
            self.s = parse_state(state, MergeQueueState)
        except Exception as err:  # noqa: BLE001
            self._config_error = self._config_error or f"bad carried state ({clip(str(err), 200)})"
            self.s = MergeQueueState()
        self._in_flight: Optional[QueueBatch] = None
        self._after_batch: list[tuple[QueueEntry, str, list[str]]] = []
        self._outbox: dict[str, list[EntryOutcome]] = {}
        self._lessons: list[Lesson] = []
        self._draining = False
        self._seen = set(self.s.recent_ids)
        self._sizes: dict[str, int] = {}
        self._held = 0
        self.train: Optional[Train] = None  # set when the run speculates
        for entry in self._held_entries():
            self._seen.add(entry.id)
            self._hold(entry)
            if not entry.seq:  # carried from a run that kept no places
                entry.seq, self.s.next_seq = self.s.next_seq, self.s.next_seq + 1

    # --- the loop ----------------------------------------------------------------------------------

    @workflow.run
    async def run(self, config: Any, state: Any = None) -> None:
        if self._config_error:
            raise ApplicationError(f"bad MergeQueueWorkflow start input: {self._config_error}", non_retryable=True)
        if compat.merge_queue_speculates():
            await self._speculate()
        else:
            await self._one_at_a_time()

    def _batch_due(self) -> bool:
        if not self.s.queue:
            return False
        window = self.train.window() if self.train is not None else self.s.window
        return (self.s.flush_requested or len(self.s.queue) >= window
                or self._oldest_wait() >= self.config.max_wait_seconds)

    def _oldest_wait(self) -> float:
        return (workflow.now() - datetime.fromisoformat(self.s.queue[0].enqueued_at)).total_seconds()

    def _wake_key(self) -> tuple[str, str]:
        return (self.s.queue[0].id if self.s.queue else "", self.s.retry_at)

    def _next_wake(self) -> Optional[timedelta]:
        waits = []
        if self.s.queue:
            waits.append(self.config.max_wait_seconds - self._oldest_wait())
        if self.s.retry_at:
            waits.append((datetime.fromisoformat(self.s.retry_at) - workflow.now()).total_seconds())
        return timedelta(seconds=max(min(waits), 0.001)) if waits else None

    def _verify_of(self, entry: QueueEntry) -> str:
        return entry.verify or self.config.verify

    def _queue_ref(self) -> str:
        return queue_ref(workflow.info().workflow_id)

    # --- continue-as-new ---------------------------------------------------------------------------

    def _should_continue_as_new(self) -> bool:
        return should_continue_as_new(self.config.max_history_events)

    async def _continue_as_new(self) -> None:
        """Between batches (none is in flight): carry the queue, the halves and bounded history."""
        self._draining = True
        await workflow.wait_condition(workflow.all_handlers_finished)
        await self._tell()
        s = self.s
        s.runs += 1
        s.recent = s.recent[-CARRIED_RECENT:]
        for outcome in s.recent:
            outcome.output_tail = outcome.output_tail[-CARRIED_TAIL:]
        while s.rejected and json_size(s.rejected) > CARRIED_REJECTED_BYTES:
            s.rejected.pop(0)
        s.recent_ids = ids_to_carry(s.recent_ids, RECENT_IDS, CARRIED_IDS_BYTES)
        workflow.logger.info("continuing as new with %d queued entries, %d halves", len(s.queue), len(s.halves))
        workflow.continue_as_new(args=[self.config, s])

    # --- what is held ------------------------------------------------------------------------------

    def _held_entries(self) -> list[QueueEntry]:
        batches = self.s.halves + self.s.batches
        held = [e for b in batches for e in b.entries + [h.entry for h in b.held]]
        return held + list(self.s.queue)

    def _hold(self, entry: QueueEntry) -> None:
        size = json_size(entry)
        self._sizes[entry.id] = size
        self._held += size

    def _release(self, entries: list[QueueEntry]) -> None:
        for entry in entries:
            self._held -= self._sizes.pop(entry.id, 0)

    # --- messages ----------------------------------------------------------------------------------
    # Handlers take `*args`: the `temporal` CLI lets anyone send no input, two inputs or anything
    # else, and a fixed signature would raise before our code runs (a signal handler that raises
    # fails the workflow task forever: the queue would be wedged).

    def _parse(self, args: tuple[Any, ...]) -> QueueEntry:
        """The one entry in a message's arguments, or InvalidQueueEntry saying what is wrong."""
        problem = args_problem(args, "entry (a JSON object with branch and expect_commit)")
        if problem:
            raise InvalidQueueEntry(problem)
        try:
            entry = parse_entry(args[0])
        except InvalidQueueEntry:
            raise
        except Exception as err:  # noqa: BLE001 - nothing a client sends may escape a handler
            raise InvalidQueueEntry(f"unreadable entry ({type(err).__name__})") from None
        if entry.branch == self.config.target:
            raise InvalidQueueEntry(f"cannot land {entry.branch} into itself")
        if not self._verify_of(entry).strip():
            raise InvalidQueueEntry("no verify command: give the entry 'verify', or start the queue with one")
        if not (entry.id and entry.id in self._seen) and self._held + json_size(entry) > HELD_BYTES:
            raise InvalidQueueEntry(f"the queue holds {self._held // 1024} KiB of unanswered entries (limit "
                                    f"{HELD_BYTES // 1024} KiB): send again once queued batches have landed")
        return entry

    def _accept(self, entry: QueueEntry) -> str:
        if not entry.id:
            entry.id = f"entry-{self.s.next_entry}"
            self.s.next_entry += 1
        if entry.id in self._seen:
            workflow.logger.info("entry %s already accepted; ignoring the repeat", entry.id)
            return entry.id
        self.s.recent_ids = remember_id(self.s.recent_ids, self._seen, entry.id, RECENT_IDS)
        entry.enqueued_at = workflow.now().isoformat()
        entry.seq, self.s.next_seq = self.s.next_seq, self.s.next_seq + 1
        self._hold(entry)
        self.s.queue.append(entry)
        self.s.stats.entries += 1
        self._refresh_details()
        return entry.id

    def _refuse(self, handler: str, args: tuple[Any, ...], reason: str) -> None:
        """Keep a bounded preview of a refused message (never the raw payload), and tell its sender."""
        reason = clip(reason, REASON_CHARS)
        self.s.stats.refused_inputs += 1
        self.s.rejected = refusal(handler, args, reason, self.s.rejected, RECENT_REJECTIONS)
        self._refusal_notice(args, reason)
        self._refresh_details()

    @workflow.signal(name=SIGNAL_ENQUEUE)
    def enqueue(self, *args: Any) -> None:
        """Fire-and-forget; a bad entry is listed under `rejected` in `status`, never raised."""
        try:
            self._accept(self._parse(args))
        except InvalidQueueEntry as err:
            self._refuse(SIGNAL_ENQUEUE, args, str(err))
        except Exception as err:  # noqa: BLE001
            self._refuse(SIGNAL_ENQUEUE, args, f"could not accept the entry ({type(err).__name__})")

    @workflow.signal(name=SIGNAL_FLUSH)
    def flush(self, *args: Any) -> None:
        """Start batches now for everything queued (any input is ignored)."""
        self.s.flush_requested = bool(self.s.queue)

    @workflow.update(name=UPDATE_SUBMIT)
    def submit(self, *args: Any) -> str:
        """Like `enqueue`, but the caller learns the entry id, or why it was refused."""
        try:
            return self._accept(self._parse(args))
        except InvalidQueueEntry as err:
            raise ApplicationError(f"entry refused: {clip(str(err))}", type="InvalidQueueEntry",
                                   non_retryable=True) from None

    @submit.validator
    def _validate_submit(self, *args: Any) -> None:
        # Refused here, the bad entry never enters history. (Accepted while continuing as new too:
        # the handler runs before the run hands its state on.)
        try:
            self._parse(args)
        except Exception as err:  # noqa: BLE001
            raise ApplicationError(f"entry refused: {clip(str(err))}", type="InvalidQueueEntry",
                                   non_retryable=True) from None

    @workflow.query(name=QUERY_STATUS)
    def status(self) -> MergeQueueStatus:
        self._live_stats()
        train = [b for b in self.s.batches if b.lane == LANE_TRAIN]
        return MergeQueueStatus(
            config=self.config, queue=self.s.queue,
            in_flight=self._in_flight or (train[0] if train else None),
            halves=self.s.halves or [b for b in self.s.batches if b.lane == LANE_ISOLATE],
            recent=self.s.recent, rejected=self.s.rejected, stats=self.s.stats, runs=self.s.runs,
            target_tip=self.s.target_tip, last_error=self.s.last_error, retry_at=self.s.retry_at,
            batches=self.s.batches,
        )

    @workflow.query(name=QUERY_STATS)
    def stats(self) -> MergeQueueStats:
        """Just the counters of `status`: cheap to ask often."""
        self._live_stats()
        return self.s.stats

    def _live_stats(self) -> None:
        s = self.s.stats
        s.parallel = self.config.parallel
        if self.train is not None:
            s.in_flight = self._busy()
            s.red_runs_needed = self.train.red_runs_needed()
            s.culprit_rate = round(self.train.culprit_rate(), 3)

    def _refresh_details(self) -> None:
        c, s = self.config, self.s.stats
        self._live_stats()
        flight = self._in_flight
        lines = [
            f"**{c.repo}** → `{c.remote}/{c.target}`",
            "",
            f"- queued entries: {len(self.s.queue)}, window {self.s.window} (max {c.max_batch}), "
            f"culprit rate {s.culprit_rate}",
            f"- landed {s.landed}, rejected {s.rejected}, conflicts {s.conflicts}, "
            f"flaky runs {s.flaky_runs}",
            f"- verify runs {s.verify_runs} ({s.verify_runs_per_landed} per landed), bisection steps "
            f"{s.bisection_steps}, pushes {s.pushes}, rebuilds {s.rebuilds}, "
            f"cancelled {s.cancelled_runs}",
            f"- refused inputs: {s.refused_inputs}",
        ]
        if flight:
            lines.insert(3, f"- in flight: {flight.id} ({len(flight.entries)} entries, "
                            f"{flight.stage})")
        if self.train is not None:
            lines.insert(3, f"- in flight: {s.in_flight} of {c.parallel} verify runs; a culprit "
                            f"takes {s.red_runs_needed} red runs of one merge")
            shown = self.s.batches[:12]
            lines[4:4] = [f"  - {stage_line(b, self.train.reds_to_reject(b))}" for b in shown]
            if len(self.s.batches) > 12:
                lines.insert(4 + 12, f"  - and {len(self.s.batches) - 12} more")
        if self.s.halves:
            lines.append(f"- halves waiting: {', '.join(b.id for b in self.s.halves[:10])}")
        if self.s.last_error:
            lines.append(f"- last error (trying again at {self.s.retry_at}): {clip(self.s.last_error, 300)}")
        if self._draining:
            lines.append("- continuing as new")
        workflow.set_current_details("\n".join(lines))
