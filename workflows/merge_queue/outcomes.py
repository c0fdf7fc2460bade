"""What the merge queue says about each entry: its outcome, the counters, the reply, the lesson.

A mixin of `MergeQueueWorkflow` (workflows/merge_queue/__init__.py): the decisions are made by the batch
steps (workflows/merge_queue/one_at_a_time.py); here each becomes an `EntryOutcome`, counted in `stats`,
kept among the recent outcomes, signalled to the entry's `reply_to` (`queue_outcomes`), and, for an
entry sent back, recorded as a lesson (activity type `queue`) so later prompts carry it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.bounded import clip
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.models.lessons import Lesson
    from taskfleet.core.models.merge_queue import (
        ENTRY_CONFLICT,
        ENTRY_LANDED,
        ENTRY_REJECTED,
        EntryOutcome,
        MergeQueueConfig,
        MergeQueueState,
        QueueBatch,
        QueueEntry,
        QueueOutcomes,
    )
    from taskfleet.core.names import ACTIVITY_RECORD_LESSON, SIGNAL_QUEUE_OUTCOMES

RECENT_OUTCOMES = 50
REASON_CHARS = 1000
TAIL_CHARS = 2000  # of the verify output, in an outcome (the log file on the worker has it all)
LESSON_TAIL_CHARS = 1500
LESSON_RETRY = RetryPolicy(maximum_attempts=3, maximum_interval=timedelta(seconds=10))
FAILURE_TYPES = {ENTRY_CONFLICT: "conflict", ENTRY_REJECTED: "verify_failed"}


class OutcomesMixin:
    """Outcomes, replies and lessons (mixed into `MergeQueueWorkflow`, whose state it uses and which
    provides `_release`)."""

    config: MergeQueueConfig
    s: MergeQueueState
    _outbox: dict[str, list[EntryOutcome]]
    _lessons: list[Lesson]

    def _decide(self, entry: QueueEntry, status: str, reason: str = "", *, commit: str = "", batch_id: str = "",
                pushed_in: str = "", files: list[str] | None = None, output_tail: str = "",
                lesson: bool = True) -> EntryOutcome:
        """Record an entry's fate: counted, kept for `status`, queued for its `reply_to`."""
        now = workflow.now()
        waited = 0.0
        if entry.enqueued_at:
            waited = max(0.0, (now - datetime.fromisoformat(entry.enqueued_at)).total_seconds())
        outcome = EntryOutcome(
            entry_id=entry.id, branch=entry.branch, status=status, reason=clip(reason, REASON_CHARS),
            files=list(files or []), output_tail=output_tail[-TAIL_CHARS:], commit=commit,
            branch_commit=entry.expect_commit, target=self.config.target, batch_id=batch_id, pushed_in=pushed_in,
            verified_in=list(entry.verified_in), split_in=list(entry.split_in), seconds_in_queue=round(waited, 3),
            decided_at=now.isoformat(),
        )
        stats = self.s.stats
        if status == ENTRY_LANDED:
            stats.landed += 1
        elif status == ENTRY_CONFLICT:
            stats.conflicts += 1
        else:
            stats.rejected += 1
        decided = stats.landed + stats.conflicts + stats.rejected
        stats.queue_seconds_total = round(stats.queue_seconds_total + waited, 3)
        stats.queue_seconds_max = max(stats.queue_seconds_max, round(waited, 3))
        stats.queue_seconds_avg = round(stats.queue_seconds_total / decided, 3)
        stats.verify_runs_per_landed = round(stats.verify_runs / stats.landed, 3) if stats.landed else 0.0
        self.s.recent = (self.s.recent + [outcome])[-RECENT_OUTCOMES:]
        if entry.reply_to:
            self._outbox.setdefault(entry.reply_to, []).append(outcome)
        if status != ENTRY_LANDED and lesson:
            self._lessons.append(Lesson(
                task_type=entry.task_type, activity_type="queue", failure_type=FAILURE_TYPES.get(status, status),
                failure_msg=(f"{outcome.reason}\n{output_tail[-LESSON_TAIL_CHARS:]}" if output_tail else outcome.reason),
                metadata={"entry": entry.id, "branch": entry.branch, "target": self.config.target,
                          "queue": workflow.info().workflow_id, "batch": batch_id,
                          "files": (outcome.files or entry.files)[:20]},
            ))
        workflow.logger.info("entry %s (%s): %s %s", entry.id, entry.branch, status, clip(reason, 200))
        self._release([entry])
        return outcome

    async def _send_outbox(self) -> None:
        """Signal every listener its outcomes; a vanished listener never blocks the queue."""
        while self._outbox:
            outbox, self._outbox = self._outbox, {}
            for listener, outcomes in outbox.items():
                message = QueueOutcomes(queue_id=workflow.info().workflow_id, repo=self.config.repo,
                                        remote=self.config.remote, target=self.config.target, outcomes=outcomes)
                try:
                    await workflow.get_external_workflow_handle(listener).signal(SIGNAL_QUEUE_OUTCOMES, message)
                except Exception as err:  # noqa: BLE001 - the listener's absence is not the queue's failure
                    workflow.logger.warning("could not tell %s about %d entries: %s", listener, len(outcomes), err)

    async def _record_lessons(self) -> None:
        """Each entry sent back becomes a lesson; a lessons file that cannot be written is logged."""
        lessons, self._lessons = self._lessons, []
        for lesson in lessons:
            try:
                await workflow.execute_activity(
                    ACTIVITY_RECORD_LESSON, lesson, start_to_close_timeout=timedelta(minutes=1),
                    retry_policy=LESSON_RETRY, summary=f"lesson: {lesson.failure_type} of {lesson.metadata.get('branch')}"[:100],
                )
            except ActivityError as err:
                workflow.logger.warning("could not record a lesson: %s", root_cause_message(err))

    async def _tell(self) -> None:
        """Replies first (callers are waiting), then lessons."""
        await self._send_outbox()
        await self._record_lessons()

    def _flaky(self, entries: list[QueueEntry], batch: QueueBatch) -> None:
        """A red run the same merge (or every part of it) passed again: a lesson `flaky` with its
        output, so the suite's owners see which test flakes; its entries go on."""
        what, _, tail = batch.red_tail.partition("\n")
        branches = [e.branch for e in entries]
        workflow.logger.info("%s: a flaky red run (%s) on %s", batch.id, what,
                             ", ".join(branches[:5]))
        self._lessons.append(Lesson(
            task_type=entries[0].task_type if entries else "", activity_type="queue",
            failure_type="flaky",
            failure_msg=(f"verify `{clip(batch.verify, 200)}` {what} on "
                         f"{batch.half_of or batch.id}, then passed on the same merge\n"
                         f"{tail[-LESSON_TAIL_CHARS:]}"),
            metadata={"entries": [e.id for e in entries][:20], "branches": branches[:20],
                      "batch": batch.id, "target": self.config.target,
                      "queue": workflow.info().workflow_id,
                      "files": sorted({f for e in entries for f in e.files})[:20]},
        ))

    def _refusal_notice(self, args: tuple[Any, ...], reason: str) -> None:
        """A refused entry that names `reply_to` and `id` is answered `rejected` at once, so no caller
        waits for an entry that was never accepted."""
        raw = args[0] if len(args) == 1 else None
        if not isinstance(raw, dict):
            return
        listener, entry_id, branch = raw.get("reply_to"), raw.get("id"), raw.get("branch")
        if not (isinstance(listener, str) and isinstance(entry_id, str) and 0 < len(listener) <= 1000
                and 0 < len(entry_id) <= 200):
            return
        outcome = EntryOutcome(
            entry_id=entry_id, branch=branch if isinstance(branch, str) and len(branch) <= 255 else "",
            status=ENTRY_REJECTED, reason=f"refused by the merge queue: {clip(reason, REASON_CHARS)}",
            target=self.config.target, decided_at=workflow.now().isoformat(),
        )
        self._outbox.setdefault(listener, []).append(outcome)
