"""A paged run's final outcomes out to the run store (in the clone), a batch per append: a run keeps
no finished outcome in its state (it would grow with the board); the window waits while the backlog
is large, and the run flushes before it continues as new or returns."""

from __future__ import annotations

import asyncio
from collections import deque
from datetime import timedelta
from typing import Optional

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.models.board_store import (
        PAGE_MAX_BYTES,
        REASON_MAX_CHARS,
        RECORD_BATCH_OUTCOMES,
        RESULT_MAX_TASKS,
        OutcomeBatch,
        OutcomePage,
        ReadOutcomesRequest,
        RecordedBatch,
    )
    from taskfleet.core.models.orchestrator import (
        TASK_SUCCEEDED,
        OrchestratorState,
        TaskOutcome,
        TaskProgress,
    )
    from taskfleet.core.models.paging import FAILED_IDS_CAP
    from taskfleet.core.names import (
        ACTIVITY_READ_OUTCOMES,
        ACTIVITY_RECORD_OUTCOMES,
    )

from taskfleet.workflows import compat
from taskfleet.workflows.orchestrator.checks import STORE_RETRY

RECORD_BATCH_BYTES = 128 * 1024  # of outcomes per append to the run store (estimated)
BACKLOG_OUTCOMES = 4 * RECORD_BATCH_OUTCOMES  # dispatch waits while more are not yet recorded
RECENT_FINISHED = 20  # finished tasks `progress` shows for a paged run


def _cost(outcome: TaskOutcome) -> int:
    """An outcome's size in an append, estimated without serializing it."""
    return 200 + len(outcome.id) + len(outcome.reason) + len(outcome.log_path) + len(outcome.commit)


class OutcomeRecorder:
    """Final outcomes not yet in the run store, the append in flight, and the few kept for
    `progress` and (a small run that never continued as new) for the result."""

    def __init__(self, repo: str, state: OrchestratorState) -> None:
        self.repo = repo
        self.s = state  # its `paging` is set once the run becomes paged; read at each call
        self._unrecorded: list[tuple[TaskOutcome, int]] = []  # finished, not yet in the run store
        self._mine: list[tuple[TaskOutcome, int]] = []  # this run's own, while few (its result)
        self._unrecorded_bytes = 0
        self._appender: Optional[asyncio.Task] = None
        self.recent: deque[TaskProgress] = deque(maxlen=RECENT_FINISHED)

    @property
    def backlog(self) -> int:
        """Final outcomes not yet appended."""
        return len(self._unrecorded)

    def record(self, outcome: TaskOutcome, row: int) -> None:
        """Queue a final outcome for the run store (appended in batches by `_append_loop`)."""
        p = self.s.paging
        outcome.reason = outcome.reason[:REASON_MAX_CHARS]
        if outcome.status != TASK_SUCCEEDED and len(p.failed_ids) < FAILED_IDS_CAP:
            p.failed_ids.append(outcome.id)
        self._unrecorded.append((outcome, row))
        if self.s.stats.runs == 1 and len(self._mine) <= RESULT_MAX_TASKS:
            self._mine.append((outcome, row))
        self._unrecorded_bytes += _cost(outcome)
        self.recent.append(TaskProgress(outcome.id, outcome.status, outcome.landed, outcome.reason,
                                        verdict=outcome.verdict))
        if (len(self._unrecorded) >= RECORD_BATCH_OUTCOMES
                or self._unrecorded_bytes >= RECORD_BATCH_BYTES):
            self._start()

    def _start(self) -> None:
        if self._unrecorded and (self._appender is None or self._appender.done()):
            self._appender = asyncio.create_task(self._append_loop())

    async def _append_loop(self) -> None:
        """Append queued outcomes to the run store, a batch at a time, one append in flight."""
        p = self.s.paging
        while self._unrecorded:
            batch, size = [], 0
            for outcome, row in self._unrecorded[:RECORD_BATCH_OUTCOMES]:
                cost = _cost(outcome)
                if batch and size + cost > RECORD_BATCH_BYTES:
                    break
                batch.append((outcome, row))
                size += cost
            outcomes = OutcomeBatch(repo=self.repo, run_ref=p.run_ref, batch_id=str(p.batches),
                                    outcomes=[o for o, _ in batch], rows=[r for _, r in batch])
            # A local activity: the append (milliseconds, in-process git) needs no server round
            # trip; a run's last append completes with it. Every worker of a board sees the clone.
            execute = (workflow.execute_local_activity if compat.outcomes_recorded_locally()
                       else workflow.execute_activity)
            await execute(ACTIVITY_RECORD_OUTCOMES, outcomes, result_type=RecordedBatch,
                          start_to_close_timeout=timedelta(seconds=120), retry_policy=STORE_RETRY,
                          summary=f"record {len(batch)} outcome(s)")
            del self._unrecorded[: len(batch)]
            self._unrecorded_bytes = max(0, self._unrecorded_bytes - size)
            p.batches += 1
            p.recorded += len(batch)

    async def flush(self) -> None:
        """Every final outcome in the run store (before continue-as-new and before the result)."""
        while self._unrecorded or (self._appender is not None and not self._appender.done()):
            self._start()
            if self._appender is not None:
                await self._appender

    async def small_run_outcomes(self) -> list[TaskOutcome]:
        """A small run's outcomes for its result, in board order; none for a big run. When this
        run recorded them all (it never continued as new), they are still here: no read back."""
        p = self.s.paging
        if p.recorded > RESULT_MAX_TASKS or not p.recorded:
            return []
        if len(self._mine) == p.recorded and compat.result_from_memory():
            return [outcome for outcome, _ in sorted(self._mine, key=lambda kept: kept[1])]
        page: OutcomePage = await workflow.execute_activity(
            ACTIVITY_READ_OUTCOMES,
            ReadOutcomesRequest(repo=self.repo, run_ref=p.run_ref, max_bytes=PAGE_MAX_BYTES),
            result_type=OutcomePage, start_to_close_timeout=timedelta(seconds=120),
            retry_policy=STORE_RETRY, summary="read the run's outcomes")
        return page.outcomes if page.complete else []
