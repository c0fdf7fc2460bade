"""The git batcher's replies: outcomes signalled to each op's `reply_to`, and results updates wait
on. The push activity tells a landed batch's listeners itself (two server trips sooner); the
batcher tells the rest, beside the next push and in batch order, and a gone listener never blocks
it. Used by `GitBatchWorkflow`, which owns one `Replies` and one `BatchWaits`."""

from __future__ import annotations

import asyncio
from typing import Optional

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.models.git_batch import (
        BATCH_COMPLETED,
        BATCH_FAILED,
        BatchResult,
        GitBatch,
        GitOpsLanded,
        OpOutcome,
        outcomes_by_listener,
    )
    from taskfleet.core.names import SIGNAL_GIT_OPS_LANDED


class Replies:
    """Signals `git_ops_landed` to ops' senders: refused ones' at once, landed ones' per batch."""

    def __init__(self, repo: str, remote: str) -> None:
        self.repo = repo
        self.remote = remote
        # Refused ops whose sender named a `reply_to`: told at once, so no caller waits for nothing.
        self._notices: list[tuple[str, OpOutcome]] = []
        # The latest batch's signals while they are on their way (`send_in_background`).
        self._sending: Optional[asyncio.Task[None]] = None

    @property
    def pending(self) -> bool:
        """Refusals not told yet."""
        return bool(self._notices)

    def add_notice(self, listener: str, outcome: OpOutcome) -> None:
        self._notices.append((listener, outcome))

    async def send_notices(self) -> None:
        while self._notices:
            notices, self._notices = self._notices, []
            by_listener: dict[str, list[OpOutcome]] = {}
            for listener, outcome in notices:
                by_listener.setdefault(listener, []).append(outcome)
            await self._signal_outcomes("", by_listener)

    async def notify(self, batch: GitBatch, told: set[str] = frozenset()) -> None:
        """Signal `git_ops_landed` to every op's `reply_to` the activity has not `told`, one after
        another (runs started before `send_in_background`); a vanished listener never blocks us."""
        await self._signal_outcomes(batch.id, _untold(batch, told))

    def send_in_background(self, batch: GitBatch, told: set[str] = frozenset()) -> None:
        """Start signalling the batch's listeners the activity has not `told`, all at once, and
        return (the next batch runs meanwhile); call `settle` before the run ends."""
        previous = self._sending
        by_listener = _untold(batch, told)
        if not by_listener:
            return

        async def send() -> None:
            if previous is not None:
                await previous
            await asyncio.gather(*(self._signal(listener, batch.id, outcomes)
                                   for listener, outcomes in by_listener.items()))

        self._sending = asyncio.create_task(send())

    async def settle(self) -> None:
        """Wait until the signals started by `send_in_background` are delivered (or given up)."""
        if self._sending is not None and not self._sending.done():
            await self._sending

    async def _signal_outcomes(self, batch_id: str,
                               by_listener: dict[str, list[OpOutcome]]) -> None:
        for listener, outcomes in by_listener.items():
            await self._signal(listener, batch_id, outcomes)

    async def _signal(self, listener: str, batch_id: str, outcomes: list[OpOutcome]) -> None:
        message = GitOpsLanded(batch_id, self.repo, self.remote, outcomes)
        try:
            await workflow.get_external_workflow_handle(listener).signal(
                SIGNAL_GIT_OPS_LANDED, message)
        except Exception as err:  # noqa: BLE001 - the listener's absence is not our failure
            workflow.logger.warning("could not tell %s about %s: %s", listener,
                                    batch_id or "a refused op", err)


def _untold(batch: GitBatch, told: set[str]) -> dict[str, list[OpOutcome]]:
    """The batch's outcomes by listener, without the listeners the push activity has told."""
    grouped = outcomes_by_listener(batch.ops, batch.outcomes)
    return {listener: outcomes for listener, outcomes in grouped.items() if listener not in told}


class BatchWaits:
    """Results of batches that an update (flush_now, retry) waits on, by batch id; only those."""

    def __init__(self) -> None:
        self._awaited: dict[str, int] = {}
        self._finished: dict[str, BatchResult] = {}

    def awaited(self, batch_id: str) -> bool:
        return batch_id in self._awaited

    def finish(self, batch: GitBatch) -> None:
        """The batch has run: keep its result if an update waits on it."""
        if batch.id in self._awaited:
            self._finished[batch.id] = BatchResult(
                batch_id=batch.id,
                status=batch.status,
                outcomes=list(batch.outcomes),
                error=f"{batch.id}: {batch.error}" if batch.status == BATCH_FAILED else "",
                batch_ids=[batch.id],
            )

    async def wait_for(self, batches: list[GitBatch]) -> BatchResult:
        """The fate of these batches' next run: only a run that ends after this call counts."""
        ids = [b.id for b in batches]
        for i in ids:
            self._finished.pop(i, None)
            self._awaited[i] = self._awaited.get(i, 0) + 1
        try:
            await workflow.wait_condition(lambda: all(i in self._finished for i in ids))
        finally:
            for i in ids:
                self._awaited[i] -= 1
                if not self._awaited[i]:
                    del self._awaited[i]
        done = [self._finished[i] if i in self._awaited else self._finished.pop(i) for i in ids]
        failed = [r for r in done if r.status == BATCH_FAILED]
        return BatchResult(
            batch_id=ids[-1],
            status=BATCH_FAILED if failed else BATCH_COMPLETED,
            outcomes=[o for r in done for o in r.outcomes],
            error="; ".join(r.error for r in failed),
            batch_ids=ids,
        )
