"""What the merge queue says about each entry: its outcome, the counters, the reply, the lesson.

The decisions are made by the batch steps (`steps.py` and `train.py`; `one_at_a_time.py` for runs
started before speculation); here each becomes an `EntryOutcome`, counted in `stats`, kept among
the recent outcomes, signalled to the entry's `reply_to` (`queue_outcomes`), and, for an entry sent
back, recorded as a lesson (activity type `queue`) so later prompts carry it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

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


class Outcomes:
    """Outcomes, replies and lessons, over the workflow's config and state; `release` lets go of
    the bytes an answered entry held."""

    def __init__(self, config: MergeQueueConfig, s: MergeQueueState,
                 release: Callable[[list[str]], None]) -> None:
        self.config, self.s, self._release = config, s, release
        self._outbox: dict[str, list[EntryOutcome]] = {}  # replies by listener, not sent yet
        self._lessons: list[Lesson] = []  # lessons not recorded yet

    @property
    def pending(self) -> bool:
        """Replies not sent yet."""
        return bool(self._outbox)

    def add_notice(self, listener: str, outcome: EntryOutcome) -> None:
        """A reply to send with the next ones (a refused entry's answer)."""
        self._outbox.setdefault(listener, []).append(outcome)

    def decide(self, entry: QueueEntry, status: str, reason: str = "", *, commit: str = "",
               batch_id: str = "", pushed_in: str = "", files: list[str] | None = None,
               output_tail: str = "", lesson: bool = True) -> EntryOutcome:
        """Record an entry's fate: counted, kept for `status`, queued for its `reply_to`."""
        now = workflow.now()
        waited = 0.0
        if entry.enqueued_at:
            waited = max(0.0, (now - datetime.fromisoformat(entry.enqueued_at)).total_seconds())
        outcome = EntryOutcome(
            entry_id=entry.id, branch=entry.branch, status=status,
            reason=clip(reason, REASON_CHARS), files=list(files or []),
            output_tail=output_tail[-TAIL_CHARS:], commit=commit,
            branch_commit=entry.expect_commit, target=self.config.target, batch_id=batch_id,
            pushed_in=pushed_in, verified_in=list(entry.verified_in),
            split_in=list(entry.split_in), seconds_in_queue=round(waited, 3),
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
        stats.verify_runs_per_landed = (round(stats.verify_runs / stats.landed, 3)
                                        if stats.landed else 0.0)
        self.s.recent = (self.s.recent + [outcome])[-RECENT_OUTCOMES:]
        if entry.reply_to:
            self._outbox.setdefault(entry.reply_to, []).append(outcome)
        if status != ENTRY_LANDED and lesson:
            self._lessons.append(Lesson(
                task_type=entry.task_type, activity_type="queue",
                failure_type=FAILURE_TYPES.get(status, status),
                failure_msg=(f"{outcome.reason}\n{output_tail[-LESSON_TAIL_CHARS:]}"
                             if output_tail else outcome.reason),
                metadata={"entry": entry.id, "branch": entry.branch, "target": self.config.target,
                          "queue": workflow.info().workflow_id, "batch": batch_id,
                          "files": (outcome.files or entry.files)[:20]},
            ))
        workflow.logger.info("entry %s (%s): %s %s", entry.id, entry.branch, status,
                             clip(reason, 200))
        self._release([entry.id])
        return outcome

    async def send_outbox(self) -> None:
        """Signal every listener its outcomes; a vanished listener never blocks the queue."""
        while self._outbox:
            outbox, self._outbox = self._outbox, {}
            for listener, outcomes in outbox.items():
                message = QueueOutcomes(queue_id=workflow.info().workflow_id,
                                        repo=self.config.repo, remote=self.config.remote,
                                        target=self.config.target, outcomes=outcomes)
                try:
                    await workflow.get_external_workflow_handle(listener).signal(
                        SIGNAL_QUEUE_OUTCOMES, message)
                except Exception as err:  # noqa: BLE001 - a gone listener never fails the queue
                    workflow.logger.warning("could not tell %s about %d entries: %s", listener,
                                            len(outcomes), err)

    async def record_lessons(self) -> None:
        """Each entry sent back becomes a lesson; a lessons file that cannot be written is
        logged."""
        lessons, self._lessons = self._lessons, []
        for lesson in lessons:
            try:
                await workflow.execute_activity(
                    ACTIVITY_RECORD_LESSON, lesson, start_to_close_timeout=timedelta(minutes=1),
                    retry_policy=LESSON_RETRY,
                    summary=(f"lesson: {lesson.failure_type} of "
                             f"{lesson.metadata.get('branch')}")[:100],
                )
            except ActivityError as err:
                workflow.logger.warning("could not record a lesson: %s", root_cause_message(err))

    async def tell(self) -> None:
        """Replies first (callers are waiting), then lessons."""
        await self.send_outbox()
        await self.record_lessons()

    def flaky(self, entries: list[QueueEntry], batch: QueueBatch) -> None:
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
