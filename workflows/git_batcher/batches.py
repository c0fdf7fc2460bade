"""When the git batcher's queue becomes batches, and how a batch runs: one push for all its ops. A
flush is due at `max_batch_size` ops, at `max_batch_age_seconds`, or on request; each batch is
one `push_batch` activity, and a failed one is kept, its ops reported failed, and retried first."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Optional

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from taskfleet.workflows.compat import activity_name
from taskfleet.workflows.git_batcher.intake import FAILED_BATCH_OVERHEAD, REASON_CHARS
from taskfleet.workflows.git_batcher.replies import BatchWaits, Replies
from taskfleet.workflows.long_lived import Inbox, trim_to_bytes

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.bounded import clip
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.models.git_batch import (
        BATCH_COMPLETED,
        BATCH_EXECUTING,
        BATCH_FAILED,
        BATCH_PENDING,
        OUTCOME_FAILED,
        GitBatch,
        GitBatchConfig,
        GitBatchState,
        GitOp,
        OpOutcome,
        PushBatchInput,
        PushBatchOutput,
    )
    from taskfleet.core.names import ACTIVITY_PUSH_BATCH

RECENT_BATCHES = 20  # finished batches `status` lists
ERROR_CHARS = 1000
PUSH_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
    non_retryable_error_types=["InvalidRepository"],
)
# What a run carries beside the accepted ops (bounded at intake): about 1 MiB at worst, far under
# the server's 2 MB payload limit.
CARRIED_EXECUTED_BYTES = 64 * 1024
CARRIED_REJECTED_BYTES = 64 * 1024
CARRIED_IDS_BYTES = 96 * 1024


def compact_batch(batch: GitBatch) -> GitBatch:
    """A finished batch as the next run keeps it for `status`: ops reduced to what names them."""
    ops = [GitOp(op_type=op.op_type, branch=op.branch, id=op.id, target=op.target)
           for op in batch.ops]
    outcomes = [dataclasses.replace(o, reason=clip(o.reason, 200)) for o in batch.outcomes]
    return dataclasses.replace(batch, ops=ops, outcomes=outcomes, error=clip(batch.error, 300))


def refs_touched(ops: list[GitOp]) -> int:
    return len({(op.target or "<default>") if op.op_type == "merge" else op.branch for op in ops})


def failed_key(batch: GitBatch) -> str:
    return f"failed batch {batch.id}"


class Batches:
    """The queue cut into batches and each batch run; `on_change` refreshes what the UI shows."""

    def __init__(self, config: GitBatchConfig, state: GitBatchState, inbox: Inbox, replies: Replies,
                 on_change: Callable[[], None]) -> None:
        self.config = config
        self.s = state
        self.inbox = inbox
        self.replies = replies
        self.waits = BatchWaits()
        self.executing: Optional[GitBatch] = None
        self.in_background = False  # replies sent while the next push runs (set at run start)
        self.flush_covers_queued = False  # a flush takes only what it found queued (run start)
        self._on_change = on_change
        for batch in state.failed_batches:
            inbox.hold(failed_key(batch), None, FAILED_BATCH_OVERHEAD)

    def oldest_age_seconds(self) -> float:
        if not self.s.queue:
            return 0.0
        return (workflow.now()
                - datetime.fromisoformat(self.s.queue[0].enqueued_at)).total_seconds()

    def until_oldest_is_due(self) -> Optional[timedelta]:
        if not self.s.queue:
            return None
        remaining = self.config.max_batch_age_seconds - self.oldest_age_seconds()
        return timedelta(seconds=max(remaining, 0.001))

    def flush_due(self) -> bool:
        if self.s.flush_requested:
            return True
        if not self.s.queue:
            return False
        return (len(self.s.queue) >= self.config.max_batch_size
                or self.oldest_age_seconds() >= self.config.max_batch_age_seconds)

    def request_flush(self) -> None:
        """A flush of what is queued now (and of failed batches): the next cut takes it."""
        self.s.flush_requested = True
        self.s.flush_through = len(self.s.queue)

    def cut(self) -> list[GitBatch]:
        """Queue -> pending batches of at most max_batch_size; failed batches are retried first.
        A full batch goes at once; the rest when the oldest op is due, or as far as a flush
        covers."""
        cut: list[GitBatch] = []
        aged = self.oldest_age_seconds() >= self.config.max_batch_age_seconds
        full_only = not self.s.flush_requested and not aged
        if not full_only:
            for batch in self.s.failed_batches:
                batch.status = BATCH_PENDING
                self.inbox.release([failed_key(batch)])
                cut.append(batch)
            self.s.failed_batches = []
        size = self.config.max_batch_size
        covered = 0 if full_only else len(self.s.queue)
        if self.flush_covers_queued and not aged and not full_only:
            covered = min(covered, self.s.flush_through)
        while self.s.queue and (len(self.s.queue) >= size or covered > 0):
            ops, self.s.queue = self.s.queue[:size], self.s.queue[size:]
            covered -= len(ops)
            cut.append(GitBatch(id=f"batch-{self.s.next_batch}", ops=ops,
                                created_at=workflow.now().isoformat()))
            self.s.next_batch += 1
        self.s.flush_requested = False
        self.s.flush_through = 0
        self.s.pending_batches.extend(cut)
        self._on_change()
        return cut

    def retry(self, batch: GitBatch) -> None:
        """A failed batch back to the pending ones (the `retry` update)."""
        self.s.failed_batches.remove(batch)
        self.inbox.release([failed_key(batch)])
        batch.status = BATCH_PENDING
        self.s.pending_batches.append(batch)
        self._on_change()

    async def execute(self, batch: GitBatch) -> None:
        told: set[str] = set()  # listeners the push activity has told
        batch.status = BATCH_EXECUTING
        batch.attempts += 1
        batch.executed_at = workflow.now().isoformat()
        self.executing = batch
        self._on_change()
        try:
            result: PushBatchOutput = await workflow.execute_activity(
                activity_name(ACTIVITY_PUSH_BATCH),
                # No patch needed for `notify`: which listeners the batcher signals follows from the
                # activity's result (an older worker's names none), which replay reads back.
                PushBatchInput(batch_id=batch.id, repo=self.config.repo, remote=self.config.remote,
                               ops=batch.ops, atomic=self.config.atomic, attempt=batch.attempts,
                               notify=True),
                result_type=PushBatchOutput,
                start_to_close_timeout=timedelta(minutes=10),
                heartbeat_timeout=timedelta(seconds=self.config.heartbeat_timeout_seconds),
                retry_policy=PUSH_RETRY,
                summary=f"push {refs_touched(batch.ops)} refs to {self.config.remote} ({batch.id})",
            )
        except ActivityError as err:
            batch.status = BATCH_FAILED
            batch.error = clip(root_cause_message(err), ERROR_CHARS)
            short = clip(batch.error, REASON_CHARS)
            batch.outcomes = [OpOutcome(op.id, op.op_type, op.branch, OUTCOME_FAILED,
                                        reason=f"batch failed: {short}") for op in batch.ops]
            # this time: the batch is kept and retried later
            self.s.stats.failed_ops += len(batch.ops)
            workflow.logger.warning("%s failed, kept for retry: %s", batch.id, batch.error)
        else:
            batch.status, batch.error = BATCH_COMPLETED, ""
            for outcome in result.outcomes:
                outcome.reason = clip(outcome.reason, REASON_CHARS)
            batch.outcomes, batch.execute_seconds = result.outcomes, result.seconds
            self._count(result)
            told = set(result.notified)
        finally:
            self.executing = None
        self.s.pending_batches.remove(batch)
        if batch.status == BATCH_FAILED:
            self.s.failed_batches.append(batch)
            self.inbox.hold(failed_key(batch), None, FAILED_BATCH_OVERHEAD)
        else:
            self.inbox.release([op.id for op in batch.ops])
            self.s.executed_batches = (self.s.executed_batches + [batch])[-RECENT_BATCHES:]
        self.waits.finish(batch)
        self._on_change()
        if self.in_background:
            self.replies.send_in_background(batch, told)
        else:
            await self.replies.notify(batch, told)

    def _count(self, result: PushBatchOutput) -> None:
        stats = self.s.stats
        stats.total_batches += 1
        stats.pushes += result.pushes
        stats.total_execute_seconds += result.seconds
        stats.landed_ops += sum(1 for o in result.outcomes if o.status != OUTCOME_FAILED)
        stats.failed_ops += sum(1 for o in result.outcomes if o.status == OUTCOME_FAILED)
        batched_ops = stats.landed_ops + stats.failed_ops
        stats.avg_ops_per_batch = batched_ops / stats.total_batches
        stats.network_savings = max(batched_ops - stats.pushes, 0)

    def compact_for_carry(self) -> None:
        """What the next run gets, within bounds; nothing accepted and unfinished is cut."""
        s = self.s
        executed = [compact_batch(b) for b in s.executed_batches[-RECENT_BATCHES:]]
        s.executed_batches = trim_to_bytes(executed, CARRIED_EXECUTED_BYTES)
        for batch in s.failed_batches:
            # Every op's outcome only repeats the batch's error; the error itself is kept.
            batch.outcomes = []
            batch.error = clip(batch.error, ERROR_CHARS)
        s.rejected = trim_to_bytes(s.rejected, CARRIED_REJECTED_BYTES)
        s.recent_ids = self.inbox.carried_ids(CARRIED_IDS_BYTES)
