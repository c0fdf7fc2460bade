"""The merge queue's speculation at work: activities for every batch in flight, at once.

The run loop of `MergeQueueWorkflow` (runs started before speculation: `one_at_a_time.py`) starts
up to `parallel` verify runs (train batches, parts of a red batch, confirmations of a red entry),
each an activity any worker of the task queue can take; every batch runs as its own task (merge
onto the batch below once that one is merged, then verify), and hands its result to `Train`
(`train.py`), which decides. A batch that leaves the flight has its task cancelled (its verify
command is stopped). Green batches at the head of the train land with ONE compare-and-swap push,
never forced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Optional

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from taskfleet.workflows.merge_queue.handover import Handover
from taskfleet.workflows.merge_queue.outcomes import Outcomes
from taskfleet.workflows.merge_queue.timing import batch_due, next_wake, wake_key
from taskfleet.workflows.merge_queue.train import Train

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.bounded import clip
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.models.merge_queue import (
        ENTRY_REJECTED,
        LANE_CONFIRM,
        LANE_TRAIN,
        PUSH_LANDED,
        STAGE_CONFIRMING,
        STAGE_GREEN,
        STAGE_MERGING,
        STAGE_PUSHING,
        STAGE_VERIFYING,
        STAGE_WAITING,
        BuildInput,
        BuildOutput,
        MergeQueueConfig,
        MergeQueueState,
        PushInput,
        PushOutput,
        QueueBatch,
        VerifyInput,
        VerifyOutput,
    )
    from taskfleet.core.names import (
        ACTIVITY_QUEUE_BUILD,
        ACTIVITY_QUEUE_PUSH,
        ACTIVITY_QUEUE_VERIFY,
    )
    from taskfleet.core.store_refs import queue_ref

# Errors no retry can fix: the entries of the batch are answered `rejected` with the reason.
CANNOT_LAND = ("QueueCannotLand", "PushDeclined", "BadTaskSetup")
GIT_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                        maximum_interval=timedelta(seconds=30), maximum_attempts=5,
                        non_retryable_error_types=list(CANNOT_LAND))
# A verify is retried only when its worker died or stalled (a red verify is a result, not an error).
VERIFY_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1),
                           maximum_interval=timedelta(seconds=30), maximum_attempts=3,
                           non_retryable_error_types=list(CANNOT_LAND))
BACKOFF_MAX_SECONDS = 600.0
PUSH = "push"
RUNNING = (STAGE_WAITING, STAGE_MERGING, STAGE_VERIFYING)


class Speculation:
    """The speculating run loop, over the workflow's config and state: `outcomes` answers entries
    and tells, `handover` continues as new, `refresh` redraws the Web UI's details. It makes the
    run's `Train`."""

    def __init__(self, config: MergeQueueConfig, s: MergeQueueState, outcomes: Outcomes,
                 handover: Handover, refresh: Callable[[], None]) -> None:
        self.config, self.s, self._outcomes, self._handover = config, s, outcomes, handover
        self._refresh_details = refresh
        self._decide, self._tell = outcomes.decide, outcomes.tell
        self.train = Train(s, config, outcomes.decide, outcomes.flaky, self.busy)
        self._tasks: dict[str, asyncio.Task] = {}
        self._changes = 0

    async def run(self) -> None:
        self.train.requeue([e for batch in self.s.halves for e in batch.entries])  # a run before
        self.s.halves = []
        self.train.fold()  # nothing is in flight when a run starts
        handover, outcomes = self._handover, self._outcomes
        seen = self._changes
        while True:
            armed = wake_key(self.s)
            try:
                await workflow.wait_condition(
                    lambda: self._changes != seen or outcomes.pending or self._startable()
                    or wake_key(self.s) != armed
                    or (handover.due() and not handover.draining),
                    timeout=next_wake(self.s, self.config), timeout_summary="a batch is due")
            except asyncio.TimeoutError:
                pass
            # Counted from here: a batch that ends while this pass awaits (telling its outcomes)
            # wakes the next wait at once, or its result would wait for an unrelated change.
            seen = self._changes
            self.train.settle()
            self._reconcile()
            self._start()
            self._refresh_details()
            await self._tell()
            if handover.due():
                handover.draining = True  # nothing new starts; what runs finishes (and lands)
                if not self._tasks:
                    self.train.fold()
                    await handover.carry()

    # --- what runs -------------------------------------------------------------------------------

    def busy(self) -> int:
        """Verify slots taken: tasks of batches still in flight (the others are being cancelled)."""
        live = self.train.live()
        return sum(1 for key in self._tasks if key.split("-again-")[0] in live)

    def _retry_pending(self) -> bool:
        return bool(self.s.retry_at) and workflow.now() < datetime.fromisoformat(self.s.retry_at)

    def _free(self) -> bool:
        return self.busy() < self.config.parallel

    def _batch_due(self) -> bool:
        return batch_due(self.s, self.config, self.train.window())

    def _queue_ref(self) -> str:
        return queue_ref(workflow.info().workflow_id)

    def _startable(self) -> bool:
        """Something `_start` would start now (the loop wakes for it)."""
        if self._retry_pending():
            return False
        if PUSH not in self._tasks and self.train.landable():
            return True
        if self._handover.draining or not self._free():
            return False
        return self._batch_due() or any(
            (b.lane == LANE_CONFIRM and b.reds + b.runs < self.train.reds_to_reject(b))
            or (b.stage == STAGE_WAITING and b.id not in self._tasks) for b in self.s.batches)

    def _start(self) -> None:
        """The push of the green head of the train, then confirmations, parts, new batches."""
        if self._retry_pending():
            return
        prefix = self.train.landable()
        if prefix and PUSH not in self._tasks:
            self._launch(PUSH, self._push_prefix(prefix))
        if self._handover.draining:
            return
        # The train keeps a slot: isolating a red batch must not stall what is queued behind it.
        moving = any(b.lane == LANE_TRAIN and b.stage in RUNNING for b in self.s.batches)
        if not moving and self._free() and self._batch_due():
            batch = self.train.cut(self.config.parallel - self.busy())
            self._launch(batch.id, self._work(batch))
        for b in list(self.s.batches):
            while (b.lane == LANE_CONFIRM and b.reds + b.runs < self.train.reds_to_reject(b)
                   and self._free()):
                b.runs += 1
                run_id = f"{b.id}-again-{self.s.stats.confirm_runs + b.runs}"
                self._launch(run_id, self._confirm(b, run_id))
        for b in list(self.s.batches):
            if b.stage == STAGE_WAITING and b.id not in self._tasks and self._free():
                self._launch(b.id, self._work(b))
        while self._free() and self._batch_due():
            batch = self.train.cut(self.config.parallel - self.busy())
            self._launch(batch.id, self._work(batch))

    def _launch(self, key: str, step: Any) -> None:
        async def run() -> None:
            try:
                await step
            except asyncio.CancelledError:
                pass  # its batch left the flight: nothing of it counts
            finally:
                self._tasks.pop(key, None)
                self._changes += 1

        self._tasks[key] = asyncio.create_task(run())

    def _reconcile(self) -> None:
        """Cancel the task of every batch no longer in flight (its verify command is stopped)."""
        live = self.train.live()
        for key, task in list(self._tasks.items()):
            batch = live.get(key.split("-again-")[0])
            confirming = batch is not None and batch.lane == LANE_CONFIRM
            if key != PUSH and (batch is None or ("-again-" in key) != confirming):
                del self._tasks[key]
                task.cancel()

    # --- one batch -------------------------------------------------------------------------------

    async def _work(self, b: QueueBatch) -> None:
        """Merge onto the batch below once it is merged, then verify; results go to the train."""
        await workflow.wait_condition(lambda: self.train.base_of(b) is not None)
        b.stage = STAGE_MERGING
        self._refresh_details()
        c = self.config
        built = await self._call(
            b, ACTIVITY_QUEUE_BUILD,
            BuildInput(repo=c.repo, remote=c.remote, target=c.target, queue_ref=self._queue_ref(),
                       batch_id=b.id, entries=b.entries, base=self.train.base_of(b)),
            BuildOutput, f"merge {len(b.entries)} entries onto {b.stacked_on or c.target} ({b.id})",
            timedelta(minutes=10), GIT_RETRY)
        if built is None:
            return
        self.train.built(b, built)
        if b.id not in self.train.live():
            return
        b.stage = STAGE_VERIFYING
        self._refresh_details()
        verified = await self._verify_merge(b, b.id)
        if verified is not None:
            self.train.verified(b, verified, b.id)

    async def _confirm(self, b: QueueBatch, run_id: str) -> None:
        """The same merged commit verified again: a culprit is red every time, a flake is not."""
        verified = await self._verify_merge(b, run_id)
        if verified is not None and b.id in self.train.live():
            self.train.confirmed(b, verified, run_id)

    async def _verify_merge(self, b: QueueBatch, run_id: str) -> Optional[VerifyOutput]:
        c = self.config
        return await self._call(
            b, ACTIVITY_QUEUE_VERIFY,
            VerifyInput(repo=c.repo, commit=b.merged_commit, command=b.verify, batch_id=run_id,
                        queue_id=workflow.info().workflow_id, target=c.target,
                        timeout_seconds=c.verify_timeout_seconds),
            VerifyOutput,
            f"verify {run_id}: {len(b.entries)} entries on {b.stacked_on or c.target}",
            timedelta(seconds=c.verify_timeout_seconds + 300), VERIFY_RETRY)

    async def _push_prefix(self, prefix: list[QueueBatch]) -> None:
        """ONE compare-and-swap push of the last green batch at the head: lands them all."""
        head, last, c = prefix[0], prefix[-1], self.config
        for b in prefix:
            b.stage = STAGE_PUSHING
        self._refresh_details()
        pushed = await self._call(
            last, ACTIVITY_QUEUE_PUSH,
            PushInput(repo=c.repo, remote=c.remote, target=c.target, commit=last.merged_commit,
                      expected_tip=head.base_tip, batch_id=last.id, queue_ref=self._queue_ref()),
            PushOutput, f"push {last.id} to {c.remote}/{c.target}", timedelta(minutes=5), GIT_RETRY,
            refused=prefix)
        live = self.train.live()
        for b in prefix:
            if b.id in live and b.stage == STAGE_PUSHING:
                b.stage = STAGE_GREEN
        if pushed is None:
            return
        if pushed.status == PUSH_LANDED:
            self.train.landed([b for b in prefix if b.id in live], pushed)
        else:  # the target moved since the train was built (someone pushed): rebuilt, not forced
            workflow.logger.info("%s: %s moved to %s; rebuilding", last.id, c.target,
                                 pushed.tip[:12])
            self.train.moved(pushed.tip)

    async def _call(self, b: QueueBatch, name: str, arg: object, result_type: type, summary: str,
                    timeout: timedelta, retry: Any,
                    refused: Optional[list[QueueBatch]] = None) -> Any:
        """One step's activity. A failure no retry fixes answers the batch's entries `rejected`;
        any other (after its retries) sends them back to the queue and waits before the next try
        (a push keeps its batches, verified)."""
        try:
            result = await workflow.execute_activity(
                name, arg, result_type=result_type, start_to_close_timeout=timeout,
                heartbeat_timeout=timedelta(seconds=self.config.heartbeat_timeout_seconds),
                retry_policy=retry, summary=summary[:100])
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):  # its batch left the flight: we cancelled it
                raise asyncio.CancelledError() from None
            message = clip(root_cause_message(err), 1000)
            live = self.train.live()
            if isinstance(err.cause, ApplicationError) and err.cause.type in CANNOT_LAND:
                for batch in refused or [b]:
                    for entry in batch.entries + [h.entry for h in batch.held]:
                        self._decide(entry, ENTRY_REJECTED, message,
                                     commit=self.s.target_tip,
                                     batch_id=batch.id, lesson=False)
                    batch.entries, batch.held = [], []
                    if batch.id in live:
                        self.train.dissolve(batch)
                return None
            self.s.failures += 1
            wait = min(BACKOFF_MAX_SECONDS, 5.0 * 2 ** (self.s.failures - 1))
            self.s.last_error = f"{b.id} ({b.stage}): {message}"
            self.s.retry_at = (workflow.now() + timedelta(seconds=wait)).isoformat()
            workflow.logger.warning("%s: tried again in %.0fs: %s", b.id, wait, message)
            if b.lane == LANE_CONFIRM:
                b.runs -= 1
            elif refused is None and b.id in live:
                self.train.dissolve(b)
            return None
        if self.s.failures:
            self.s.failures, self.s.last_error, self.s.retry_at = 0, "", ""
        return result


def stage_line(b: QueueBatch, needed: int) -> str:
    """One batch as the Web UI's details show it: stage, lane, base."""
    on = f"on {b.stacked_on}" if b.stacked_on else "on the tip"
    what = f"{b.stage} {b.reds}/{needed} red" if b.stage == STAGE_CONFIRMING else b.stage
    part = f", part of {b.half_of}" if b.half_of else ""
    return f"{b.id} [{b.lane}] {what}, {len(b.entries)} entries {on}{part}"
