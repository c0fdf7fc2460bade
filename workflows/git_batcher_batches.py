"""The git batcher's batching: when the queue becomes batches, and how a batch runs.

A flush is due when the queue holds `max_batch_size` ops, its oldest op is `max_batch_age_seconds`
old, or a client asked. The queue is then cut into batches of at most `max_batch_size` (failed
batches first, retried), and each runs as one `push_batch` activity: one push for all its ops. A
batch that fails is kept, every op of it reported failed, and retried at the next flush.

A mixin of `GitBatchWorkflow` (workflows/git_batcher.py), whose state and helpers it uses.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Optional

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

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

from taskfleet.workflows.compat import activity_name
from taskfleet.workflows.git_batcher_intake import REASON_CHARS, HeldOps
from taskfleet.workflows.git_batcher_replies import BatchWaits, Replies

RECENT_BATCHES = 20  # finished batches `status` lists
ERROR_CHARS = 1000
PUSH_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
    non_retryable_error_types=["InvalidRepository"],
)


def compact_batch(batch: GitBatch) -> GitBatch:
    """A finished batch as the next run keeps it for `status`: ops reduced to what names them."""
    ops = [GitOp(op_type=op.op_type, branch=op.branch, id=op.id, target=op.target) for op in batch.ops]
    outcomes = [dataclasses.replace(o, reason=clip(o.reason, 200)) for o in batch.outcomes]
    return dataclasses.replace(batch, ops=ops, outcomes=outcomes, error=clip(batch.error, 300))


def refs_touched(ops: list[GitOp]) -> int:
    return len({(op.target or "<default>") if op.op_type == "merge" else op.branch for op in ops})


class BatchingMixin:
    """Mixed into `GitBatchWorkflow`, which provides `_refresh_details`."""

    config: GitBatchConfig
    s: GitBatchState
    _executing: Optional[GitBatch]
    _held: HeldOps
    _replies: Replies
    _waits: BatchWaits
    _replies_in_background: bool

    def _oldest_age_seconds(self) -> float:
        if not self.s.queue:
            return 0.0
        enqueued = datetime.fromisoformat(self.s.queue[0].enqueued_at)
        return (workflow.now() - enqueued).total_seconds()

    def _until_oldest_is_due(self) -> Optional[timedelta]:
        if not self.s.queue:
            return None
        remaining = self.config.max_batch_age_seconds - self._oldest_age_seconds()
        return timedelta(seconds=max(remaining, 0.001))

    def _flush_due(self) -> bool:
        if self.s.flush_requested:
            return True
        if not self.s.queue:
            return False
        return (
            len(self.s.queue) >= self.config.max_batch_size
            or self._oldest_age_seconds() >= self.config.max_batch_age_seconds
        )

    def _cut_batches(self) -> list[GitBatch]:
        """Queue -> pending batches of at most max_batch_size; failed batches are retried first."""
        cut: list[GitBatch] = []
        full_only = not self.s.flush_requested and self._oldest_age_seconds() < self.config.max_batch_age_seconds
        if not full_only:
            for batch in self.s.failed_batches:
                batch.status = BATCH_PENDING
                cut.append(batch)
            self._held.release_failed_batches(len(self.s.failed_batches))
            self.s.failed_batches = []
        size = self.config.max_batch_size
        while self.s.queue and (len(self.s.queue) >= size or not full_only):
            ops, self.s.queue = self.s.queue[:size], self.s.queue[size:]
            batch = GitBatch(
                id=f"batch-{self.s.next_batch}",
                ops=ops,
                created_at=workflow.now().isoformat(),
            )
            self.s.next_batch += 1
            cut.append(batch)
        self.s.flush_requested = False
        self.s.pending_batches.extend(cut)
        self._refresh_details()
        return cut

    async def _execute(self, batch: GitBatch) -> None:
        told: set[str] = set()  # listeners the push activity has told
        batch.status = BATCH_EXECUTING
        batch.attempts += 1
        batch.executed_at = workflow.now().isoformat()
        self._executing = batch
        self._refresh_details()
        summary = f"push {refs_touched(batch.ops)} refs to {self.config.remote} ({batch.id})"
        try:
            result: PushBatchOutput = await workflow.execute_activity(
                activity_name(ACTIVITY_PUSH_BATCH),
                PushBatchInput(
                    batch_id=batch.id,
                    repo=self.config.repo,
                    remote=self.config.remote,
                    ops=batch.ops,
                    atomic=self.config.atomic,
                    attempt=batch.attempts,
                    # No patch needed: which listeners the batcher signals follows from the
                    # activity's result (an older worker's names none), which replay reads back.
                    notify=True,
                ),
                result_type=PushBatchOutput,
                start_to_close_timeout=timedelta(minutes=10),
                heartbeat_timeout=timedelta(seconds=self.config.heartbeat_timeout_seconds),
                retry_policy=PUSH_RETRY,
                summary=summary,
            )
        except ActivityError as err:
            batch.status = BATCH_FAILED
            batch.error = clip(root_cause_message(err), ERROR_CHARS)
            short = clip(batch.error, REASON_CHARS)
            batch.outcomes = [
                OpOutcome(op.id, op.op_type, op.branch, OUTCOME_FAILED, reason=f"batch failed: {short}")
                for op in batch.ops
            ]
            # Every op of a failed batch failed this time (the batch is kept and retried later).
            self.s.stats.failed_ops += len(batch.ops)
            workflow.logger.warning("%s failed, kept for retry: %s", batch.id, batch.error)
        else:
            batch.status = BATCH_COMPLETED
            batch.error = ""
            for outcome in result.outcomes:
                outcome.reason = clip(outcome.reason, REASON_CHARS)
            batch.outcomes = result.outcomes
            batch.execute_seconds = result.seconds
            self._count(result)
            told = set(result.notified)
        finally:
            self._executing = None
        self.s.pending_batches.remove(batch)
        if batch.status == BATCH_FAILED:
            self.s.failed_batches.append(batch)
            self._held.hold_failed_batches()
        else:
            self._held.release(batch.ops)
            self.s.executed_batches = (self.s.executed_batches + [batch])[-RECENT_BATCHES:]
        self._waits.finish(batch)
        self._refresh_details()
        if self._replies_in_background:
            self._replies.send_in_background(batch, told)
        else:
            await self._replies.notify(batch, told)

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
