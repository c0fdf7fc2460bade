"""`MergeQueueWorkflow`: one per (clone, remote, target branch); keeps the target green.

Entries (a branch and the commit it must be at) arrive by signal `enqueue` or update `submit`, from
a board's tasks (`land = "queue"`) or any client. A batch starts when the window is full, when the
oldest entry has waited `max_wait_seconds`, or on `flush`, and while verify slots are free: up to
`parallel` batches are verified at once, each stacked on the one ahead. Beside it: `intake.py` (a
message to one entry), `timing.py` (when a batch is due), `steps.py` (the run loop: the activities
of every batch in flight), `train.py` (what a result means), `outcomes.py` (what each entry is
told), `handover.py` (continue-as-new) and `one_at_a_time.py` (the run loop of queues started
before speculation). The queue lives in workflow state: an accepted entry survives worker crashes,
server restarts and continue-as-new until it is answered.
"""

from __future__ import annotations

from typing import Any, Optional

from temporalio import workflow
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ApplicationError

from taskfleet.workflows import compat
from taskfleet.workflows.long_lived import Inbox, parse_start, refuse, show
from taskfleet.workflows.merge_queue.handover import Handover
from taskfleet.workflows.merge_queue.intake import (
    HELD_BYTES,
    REASON_CHARS,
    RECENT_IDS,
    RECENT_REJECTIONS,
    parse_queue_entry,
    refusal_notice,
)
from taskfleet.workflows.merge_queue.one_at_a_time import OneAtATime
from taskfleet.workflows.merge_queue.outcomes import Outcomes
from taskfleet.workflows.merge_queue.steps import Speculation, stage_line

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.bounded import clip
    from taskfleet.core.merge_queue_validation import InvalidQueueEntry, parse_queue_config
    from taskfleet.core.models.git_batch import RejectedOp
    from taskfleet.core.models.merge_queue import (
        LANE_ISOLATE,
        LANE_TRAIN,
        MergeQueueConfig,
        MergeQueueState,
        MergeQueueStats,
        MergeQueueStatus,
        QueueEntry,
    )
    from taskfleet.core.names import (
        MERGE_QUEUE_WORKFLOW,
        QUERY_STATS,
        QUERY_STATUS,
        SIGNAL_ENQUEUE,
        SIGNAL_FLUSH,
        UPDATE_SUBMIT,
    )


# Worker Versioning: AUTO_UPGRADE, as the git batcher: a queue never ends (it continues as new), so
# pinned it would hold its first version forever; its state travels as data, and any new command
# is guarded with `workflow.patched` (workflows/compat.py).
@workflow.defn(name=MERGE_QUEUE_WORKFLOW, versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class MergeQueueWorkflow:
    @workflow.init
    def __init__(self, config: Any, state: Any = None) -> None:
        # Raw JSON in, parsed here: a bad start input fails the workflow with a message instead of
        # failing its first task forever (as the data converter would).
        self.config, self.s, self._config_error = parse_start(
            config, state, parse_queue_config, lambda: MergeQueueConfig(repo="", target=""),
            MergeQueueState, InvalidQueueEntry)
        self._inbox = Inbox(self.s, RECENT_IDS, HELD_BYTES, "entries")
        self._outcomes = Outcomes(self.config, self.s, self._inbox.release)
        self._handover = Handover(self.config, self.s, self._inbox, self._outcomes.tell)
        # The run loop, made by `run`: one of the two paths (workflows/compat.py).
        self._speculation: Optional[Speculation] = None
        self._one_at_a_time: Optional[OneAtATime] = None
        for entry in self._held_entries():
            self._inbox.mark(entry.id)
            self._inbox.hold(entry.id, entry)
            if not entry.seq:  # carried from a run that kept no places
                entry.seq, self.s.next_seq = self.s.next_seq, self.s.next_seq + 1

    @workflow.run
    async def run(self, config: Any, state: Any = None) -> None:
        if self._config_error:
            raise ApplicationError(f"bad MergeQueueWorkflow start input: {self._config_error}",
                                   non_retryable=True)
        if compat.merge_queue_speculates():
            self._speculation = Speculation(self.config, self.s, self._outcomes, self._handover,
                                            self._refresh_details)
            await self._speculation.run()
        else:
            self._one_at_a_time = OneAtATime(self.config, self.s, self._outcomes, self._handover,
                                             self._refresh_details)
            await self._one_at_a_time.run()

    def _held_entries(self) -> list[QueueEntry]:
        batches = self.s.halves + self.s.batches
        held = [e for b in batches for e in b.entries + [h.entry for h in b.held]]
        return held + list(self.s.queue)

    # --- messages ---------------------------------------------------------------------------------
    # Handlers take `*args`: the `temporal` CLI lets anyone send no input, two inputs or anything
    # else, and a fixed signature would raise before our code runs (a signal handler that raises
    # fails the workflow task forever: the queue would be wedged).

    def _parse(self, args: tuple[Any, ...]) -> QueueEntry:
        """The one entry in a message's arguments, or InvalidQueueEntry saying what is wrong."""
        return parse_queue_entry(args, self.config, self._inbox)

    def _accept(self, entry: QueueEntry) -> str:
        if not entry.id:
            entry.id = f"entry-{self.s.next_entry}"
            self.s.next_entry += 1
        if self._inbox.knows(entry.id):
            workflow.logger.info("entry %s already accepted; ignoring the repeat", entry.id)
            return entry.id
        self._inbox.remember(entry.id)
        entry.enqueued_at = workflow.now().isoformat()
        entry.seq, self.s.next_seq = self.s.next_seq, self.s.next_seq + 1
        self._inbox.hold(entry.id, entry)
        self.s.queue.append(entry)
        self.s.stats.entries += 1
        self._refresh_details()
        return entry.id

    def _refuse(self, handler: str, args: tuple[Any, ...], reason: str) -> None:
        """Keep a bounded preview of a refused message (never the raw payload), and tell its
        sender."""
        reason = clip(reason, REASON_CHARS)
        self.s.stats.refused_inputs += 1
        self.s.rejected = refuse(self.s.rejected, RECENT_REJECTIONS, handler, args, reason,
                                 RejectedOp.refused)
        notice = refusal_notice(args, reason, self.config.target)
        if notice is not None:
            self._outcomes.add_notice(*notice)
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
        flight = self._one_at_a_time.in_flight if self._one_at_a_time is not None else None
        return MergeQueueStatus(
            config=self.config, queue=self.s.queue,
            in_flight=flight or (train[0] if train else None),
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
        if self._speculation is not None:
            train = self._speculation.train
            s.in_flight = self._speculation.busy()
            s.red_runs_needed = train.red_runs_needed()
            s.culprit_rate = round(train.culprit_rate(), 3)

    def _refresh_details(self) -> None:
        c, s = self.config, self.s.stats
        self._live_stats()
        flight = self._one_at_a_time.in_flight if self._one_at_a_time is not None else None
        lines = [
            f"- queued entries: {len(self.s.queue)}, window {self.s.window} (max {c.max_batch}), "
            f"culprit rate {s.culprit_rate}",
            f"- landed {s.landed}, rejected {s.rejected}, conflicts {s.conflicts}, "
            f"flaky runs {s.flaky_runs}",
            f"- verify runs {s.verify_runs} ({s.verify_runs_per_landed} per landed), bisection "
            f"steps {s.bisection_steps}, pushes {s.pushes}, rebuilds {s.rebuilds}, "
            f"cancelled {s.cancelled_runs}",
            f"- refused inputs: {s.refused_inputs}",
        ]
        if flight:
            lines.insert(1, f"- in flight: {flight.id} ({len(flight.entries)} entries, "
                            f"{flight.stage})")
        if self._speculation is not None:
            train = self._speculation.train
            lines.insert(1, f"- in flight: {s.in_flight} of {c.parallel} verify runs; a culprit "
                            f"takes {s.red_runs_needed} red runs of one merge")
            shown = self.s.batches[:12]
            lines[2:2] = [f"  - {stage_line(b, train.reds_to_reject(b))}" for b in shown]
            if len(self.s.batches) > 12:
                lines.insert(2 + 12, f"  - and {len(self.s.batches) - 12} more")
        if self.s.halves:
            lines.append(f"- halves waiting: {', '.join(b.id for b in self.s.halves[:10])}")
        if self.s.last_error:
            lines.append(f"- last error (trying again at {self.s.retry_at}): "
                         f"{clip(self.s.last_error, 300)}")
        show(f"**{c.repo}** → `{c.remote}/{c.target}`", lines, self._handover.draining)
