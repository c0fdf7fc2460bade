"""One batch at a time from merge to push, and the bisection of a red one (after bors-ng's divider).

The path of queues started before speculation (workflows/compat.py `merge_queue_speculates`): such
a run keeps it until it continues as new; new runs speculate (`steps.py`). One batch at a time: its
entries are merged in order onto the target's tip (entries that conflict or cannot land are
answered at once and left out), the merged commit is verified ONCE, and a green one moves the
target with ONE compare-and-swap push; if the target moved meanwhile, the batch is rebuilt on the
new tip and verified again (never forced). A red batch of one entry is its culprit (rejected with
the tail of the verify output); a larger one is split in two halves that run before anything else
queued: a green half lands at once, and the other half is then rebuilt on the new tip. The window
(entries per new batch) grows by one after a green batch and halves after a red one, between 1
and `max_batch`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Optional

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from taskfleet.workflows.merge_queue.handover import Handover
from taskfleet.workflows.merge_queue.intake import verify_of
from taskfleet.workflows.merge_queue.outcomes import Outcomes
from taskfleet.workflows.merge_queue.steps import (
    BACKOFF_MAX_SECONDS,
    CANNOT_LAND,
    GIT_RETRY,
    VERIFY_RETRY,
)
from taskfleet.workflows.merge_queue.timing import batch_due, next_wake, wake_key

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.bounded import clip
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.models.merge_queue import (
        ENTRY_CONFLICT,
        ENTRY_LANDED,
        ENTRY_REJECTED,
        MERGE_CONFLICT,
        MERGE_IN_TARGET,
        MERGE_MERGED,
        PUSH_LANDED,
        STAGE_BISECTING,
        STAGE_MERGING,
        STAGE_PUSHING,
        STAGE_VERIFYING,
        BuildInput,
        BuildOutput,
        MergeQueueConfig,
        MergeQueueState,
        PushInput,
        PushOutput,
        QueueBatch,
        QueueEntry,
        VerifyInput,
        VerifyOutput,
    )
    from taskfleet.core.names import (
        ACTIVITY_QUEUE_BUILD,
        ACTIVITY_QUEUE_PUSH,
        ACTIVITY_QUEUE_VERIFY,
    )
    from taskfleet.core.store_refs import queue_ref

TRAIL = 20  # verify runs and splits remembered per entry
# How a batch's steps ended.
LANDED, SPLIT, KEPT, DONE = "landed", "split", "kept", "done"


class OneAtATime:
    """Building, verifying, pushing and bisecting one batch at a time, over the workflow's config
    and state: `outcomes` answers entries and tells, `handover` continues as new, `refresh`
    redraws the Web UI's details. `in_flight`: the batch running now."""

    def __init__(self, config: MergeQueueConfig, s: MergeQueueState, outcomes: Outcomes,
                 handover: Handover, refresh: Callable[[], None]) -> None:
        self.config, self.s, self._outcomes, self._handover = config, s, outcomes, handover
        self._refresh_details = refresh
        self._decide, self._tell = outcomes.decide, outcomes.tell
        self.in_flight: Optional[QueueBatch] = None
        # Entries that conflicted only with entries ahead of them in the running batch.
        self._after_batch: list[tuple[QueueEntry, str, list[str]]] = []

    async def run(self) -> None:
        """The run loop of a queue started before speculation: one batch at a time."""
        self.s.window = max(1, min(self.s.window or self.config.max_batch, self.config.max_batch))
        self.s.stats.window = self.s.window
        c, s = self.config, self.s
        workflow.logger.info("merge queue %s -> %s/%s run %d: %d queued, %d halves carried", c.repo,
                             c.remote, c.target, s.runs, len(s.queue), len(s.halves))
        self._refresh_details()
        while True:
            # The timer is armed for the head of the queue as it is now; a new head (an entry into
            # an empty queue) or a new retry time wakes the loop to arm it again.
            armed = wake_key(self.s)
            try:
                await workflow.wait_condition(
                    lambda: self._outcomes.pending or self._handover.due()
                    or self._work_ready() or wake_key(self.s) != armed,
                    timeout=next_wake(self.s, self.config), timeout_summary="a batch is due",
                )
            except asyncio.TimeoutError:
                pass
            await self._tell()
            if self._handover.due():
                await self._handover.carry()
            if not self._work_ready():
                continue
            batch = self.s.halves.pop(0) if self.s.halves else self._cut()
            await self._run_batch(batch)
            await self._tell()

    def _work_ready(self) -> bool:
        if self.s.retry_at and workflow.now() < datetime.fromisoformat(self.s.retry_at):
            return False
        return bool(self.s.halves) or batch_due(self.s, self.config, self.s.window)

    def _queue_ref(self) -> str:
        return queue_ref(workflow.info().workflow_id)

    def _cut(self) -> QueueBatch:
        """The next batch: up to `window` entries from the head of the queue, in order, that share
        the head's verify command (the others wait for a batch of their own)."""
        verify = verify_of(self.s.queue[0], self.config)
        taken: list[QueueEntry] = []
        kept: list[QueueEntry] = []
        for entry in self.s.queue:
            if len(taken) < self.s.window and verify_of(entry, self.config) == verify:
                taken.append(entry)
            else:
                kept.append(entry)
        self.s.queue = kept
        if not self.s.queue:
            self.s.flush_requested = False
        return self._new_batch(taken, verify)

    def _new_batch(self, entries: list[QueueEntry], verify: str, half_of: str = "") -> QueueBatch:
        batch = QueueBatch(id=f"batch-{self.s.next_batch}", entries=entries, verify=verify,
                           half_of=half_of, started_at=workflow.now().isoformat())
        self.s.next_batch += 1
        return batch

    async def _run_batch(self, batch: QueueBatch) -> None:
        """Merge, verify, push; rebuilt while the target moves under it; split when red."""
        self.in_flight = batch
        self._after_batch = []
        try:
            ended = await self._steps(batch)
        finally:
            self.in_flight = None
            self._refresh_details()
        # Entries that conflicted only with entries ahead of them in this batch: once those landed,
        # they are answered with the tip to redo them on; if the batch was split or kept, they go
        # along with it (whether they conflict depends on what of it lands).
        deferred, self._after_batch = self._after_batch, []
        if ended in (SPLIT, KEPT) and deferred:
            self.s.halves[1 if ended == SPLIT else 0].entries.extend(
                entry for entry, _, _ in deferred)
        else:
            for entry, reason, files in deferred:
                self._decide(entry, ENTRY_CONFLICT, reason, commit=self.s.target_tip,
                             batch_id=batch.id, files=files)
        await self._tell()

    async def _steps(self, batch: QueueBatch) -> str:
        """How the batch ended: landed, split (red), kept (for a later try) or done (nothing
        left)."""
        while batch.entries:
            built = await self._build(batch)
            if built is None:
                return KEPT if self.s.halves and self.s.halves[0] is batch else DONE
            await self._tell()  # conflicts and refusals are answered before the verify
            if not batch.entries:
                return DONE
            verified = await self._verify(batch)
            if verified is None:
                return KEPT if self.s.halves and self.s.halves[0] is batch else DONE
            if not verified.passed:
                return await self._red(batch, verified)
            pushed = await self._push(batch)
            if pushed is None:
                return KEPT if self.s.halves and self.s.halves[0] is batch else DONE
            if pushed.status == PUSH_LANDED:
                await self._green(batch, pushed)
                return LANDED
            # The target moved since the chain was built (someone pushed): rebuild on the new
            # tip and verify again. The lease made the push refuse; nothing was forced.
            workflow.logger.info("%s: %s moved to %s; rebuilding", batch.id, self.config.target,
                                 pushed.tip[:12])
            batch.rebuilds += 1
            self.s.stats.rebuilds += 1
            self.s.target_tip = pushed.tip
        return DONE

    def _stage(self, batch: QueueBatch, stage: str) -> None:
        batch.stage = stage
        self._refresh_details()

    async def _build(self, batch: QueueBatch) -> Optional[BuildOutput]:
        self._stage(batch, STAGE_MERGING)
        built = await self._activity(
            batch, ACTIVITY_QUEUE_BUILD,
            BuildInput(repo=self.config.repo, remote=self.config.remote, target=self.config.target,
                       queue_ref=self._queue_ref(), batch_id=batch.id, entries=batch.entries),
            BuildOutput,
            f"merge {len(batch.entries)} entries onto {self.config.target} ({batch.id})",
            timedelta(minutes=10), GIT_RETRY,
        )
        if built is None:
            return None
        self.s.target_tip = batch.base_tip = built.tip
        batch.merged_commit = built.head
        fates = {m.entry_id: m for m in built.merges}
        merged = []
        for entry in batch.entries:
            fate = fates.get(entry.id)
            if fate is not None and fate.status == MERGE_MERGED:
                merged.append(entry)
            elif fate is not None and fate.status == MERGE_IN_TARGET:
                self._decide(entry, ENTRY_LANDED, fate.reason, commit=built.tip, batch_id=batch.id)
            elif fate is not None and fate.status == MERGE_CONFLICT and fate.with_batch:
                self._after_batch.append((entry, fate.reason, fate.files))
            elif fate is not None and fate.status == MERGE_CONFLICT:
                self._decide(entry, ENTRY_CONFLICT, fate.reason, commit=built.tip,
                             batch_id=batch.id, files=fate.files)
            else:  # its branch is missing or moved: the sender's to fix, not a lesson about it
                reason = (fate.reason if fate is not None
                          else "the merge step reported nothing for it")
                self._decide(entry, ENTRY_REJECTED, reason, commit=built.tip, batch_id=batch.id,
                             lesson=False)
        batch.entries = merged
        return built

    async def _verify(self, batch: QueueBatch) -> Optional[VerifyOutput]:
        self._stage(batch, STAGE_VERIFYING)
        verified = await self._activity(
            batch, ACTIVITY_QUEUE_VERIFY,
            VerifyInput(repo=self.config.repo, commit=batch.merged_commit, command=batch.verify,
                        batch_id=batch.id, queue_id=workflow.info().workflow_id,
                        target=self.config.target,
                        timeout_seconds=self.config.verify_timeout_seconds),
            VerifyOutput,
            f"verify {batch.id}: {len(batch.entries)} entries on {self.config.target}",
            timedelta(seconds=self.config.verify_timeout_seconds + 300), VERIFY_RETRY,
            heartbeat=timedelta(seconds=self.config.heartbeat_timeout_seconds),
        )
        if verified is None:
            return None
        stats = self.s.stats
        stats.verify_runs += 1
        stats.batches += 1
        stats.verify_seconds = round(stats.verify_seconds + verified.seconds, 3)
        for entry in batch.entries:
            entry.verified_in = (entry.verified_in + [batch.id])[-TRAIL:]
        return verified

    async def _push(self, batch: QueueBatch) -> Optional[PushOutput]:
        self._stage(batch, STAGE_PUSHING)
        return await self._activity(
            batch, ACTIVITY_QUEUE_PUSH,
            PushInput(repo=self.config.repo, remote=self.config.remote, target=self.config.target,
                      commit=batch.merged_commit, expected_tip=batch.base_tip, batch_id=batch.id,
                      queue_ref=self._queue_ref()),
            PushOutput, f"push {batch.id} to {self.config.remote}/{self.config.target}",
            timedelta(minutes=5), GIT_RETRY,
            heartbeat=timedelta(seconds=self.config.heartbeat_timeout_seconds),
        )

    async def _green(self, batch: QueueBatch, pushed: PushOutput) -> None:
        self.s.stats.pushes += 1
        self.s.target_tip = pushed.tip
        for entry in batch.entries:
            self._decide(entry, ENTRY_LANDED, f"landed with {batch.id}", commit=pushed.tip,
                         batch_id=batch.id, pushed_in=batch.id)
        self._resize(+1)
        await self._tell()

    async def _red(self, batch: QueueBatch, verified: VerifyOutput) -> str:
        self._resize(-1)
        what = "timed out" if verified.timed_out else f"exited with {verified.exit_code}"
        if len(batch.entries) == 1:
            [entry] = batch.entries
            self._decide(entry, ENTRY_REJECTED,
                         f"verify `{clip(batch.verify, 200)}` {what} on {entry.branch} merged onto "
                         f"{self.config.target} at {batch.base_tip[:12]} ({batch.id})",
                         commit=batch.base_tip, batch_id=batch.id, output_tail=verified.output_tail)
            await self._tell()
            return DONE
        # Bisect: the first half runs next on the current tip, then the second on whatever the tip
        # is by then; both before anything still queued, so entries keep their order.
        self._stage(batch, STAGE_BISECTING)
        self.s.stats.bisection_steps += 1
        for entry in batch.entries:
            entry.split_in = (entry.split_in + [batch.id])[-TRAIL:]
        middle = (len(batch.entries) + 1) // 2
        halves = [self._new_batch(batch.entries[:middle], batch.verify, batch.id),
                  self._new_batch(batch.entries[middle:], batch.verify, batch.id)]
        self.s.halves[0:0] = halves
        workflow.logger.info("%s is red (%s): split into %s", batch.id, what,
                             ", ".join(h.id for h in halves))
        return SPLIT

    def _resize(self, direction: int) -> None:
        """Grow the window by one after green, halve it after red (between 1 and max_batch)."""
        window = self.s.window + 1 if direction > 0 else self.s.window // 2
        self.s.window = self.s.stats.window = max(1, min(self.config.max_batch, window))

    async def _activity(self, batch: QueueBatch, name: str, arg: object, result_type: type,
                        summary: str, timeout: timedelta, retry: RetryPolicy,
                        heartbeat: Optional[timedelta] = None):
        """Run one step's activity. A failure that no retry fixes answers the batch's entries
        `rejected`; any other (after its retries) keeps the batch, first in line, for a later
        try."""
        try:
            result = await workflow.execute_activity(
                name, arg, result_type=result_type, start_to_close_timeout=timeout,
                heartbeat_timeout=heartbeat or timedelta(
                    seconds=self.config.heartbeat_timeout_seconds),
                retry_policy=retry, summary=summary[:100],
            )
        except ActivityError as err:
            message = clip(root_cause_message(err), 1000)
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type in CANNOT_LAND:
                for entry in batch.entries:
                    self._decide(entry, ENTRY_REJECTED, message, commit=self.s.target_tip,
                                 batch_id=batch.id, lesson=False)
                batch.entries = []
                await self._tell()
                return None
            self.s.failures += 1
            wait = min(BACKOFF_MAX_SECONDS, 5.0 * 2 ** (self.s.failures - 1))
            self.s.last_error = f"{batch.id} ({batch.stage}): {message}"
            self.s.retry_at = (workflow.now() + timedelta(seconds=wait)).isoformat()
            batch.stage = ""
            self.s.halves.insert(0, batch)
            workflow.logger.warning("%s kept for a later try (in %.0fs): %s", batch.id, wait,
                                    message)
            return None
        if self.s.failures:
            self.s.failures, self.s.last_error, self.s.retry_at = 0, "", ""
        return result
