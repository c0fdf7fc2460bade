"""What the orchestrator shows: the `progress` query, the Web UI's current details, and its result.

All of it reads counters kept as statuses change (the tally), never a walk over every task of a
big board, so a query or a details refresh costs the same at 20 tasks as at 2,000. A paged run
shows the tasks in flight and the last few finished; the run store has every finished one.

A mixin of `OrchestratorWorkflow` (workflows/orchestrator.py), whose state it reads.
"""

from __future__ import annotations

import asyncio
from collections import deque
from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.models.orchestrator import (
        TASK_CANCELLED,
        TASK_FAILED,
        TASK_PENDING,
        TASK_RUNNING,
        TASK_SUCCEEDED,
        OrchestratorInput,
        OrchestratorProgress,
        OrchestratorResult,
        OrchestratorState,
        TaskOutcome,
        TaskProgress,
    )
    from taskfleet.core.models.review import STAGE_IMPLEMENTING, STAGE_LANDING

from taskfleet.workflows.orchestrator_recorder import OutcomeRecorder


class ProgressViewsMixin:
    """Mixed into `OrchestratorWorkflow`, which provides the merge-queue side (`_queued`,
    `_queue_details`) and the state read here."""

    params: OrchestratorInput
    s: OrchestratorState
    max_parallel: int
    _running: dict[str, asyncio.Task]
    _stages: dict[str, str]
    _refused: deque[str]
    _tally: dict[str, int]
    _run_store: OutcomeRecorder

    def _stage_of(self, task_id: str, status: str) -> str:
        if task_id in self._running:
            return self._stages.get(task_id, STAGE_IMPLEMENTING)
        if status == TASK_SUCCEEDED and task_id in self.s.awaiting_landing.values():
            return STAGE_LANDING
        return ""

    def _progress_of(self, t: TaskOutcome) -> TaskProgress:
        return TaskProgress(t.id, t.status, t.landed, t.reason, self._stage_of(t.id, t.status), t.verdict)

    def _pushes(self) -> int:
        forgotten = self.s.paging.pushes_forgotten if self.s.paging else 0
        return len(self.s.landed_batches) + forgotten

    def _counts(self) -> dict[str, int]:
        return dict(self._tally)

    def _progress(self) -> OrchestratorProgress:
        """Counts by state (and landed), running tasks, and every task's status (a paged run: the
        tasks in flight and the last few finished; the run store has every finished one)."""
        p = self.s.paging
        if p is not None:
            return OrchestratorProgress(
                counts=self._counts(),
                running=list(self._running),
                tasks=[self._progress_of(t) for t in self.s.outcomes.values()] + list(self._run_store.recent),
                pushes=self._pushes(),
                run_ref=p.run_ref,
                repo=self.params.repo,
                total=p.board.open_tasks,
                failed_ids=list(p.failed_ids),
                rejected=list(self._refused),
            )
        return OrchestratorProgress(
            counts=self._counts(),
            running=list(self._running),
            tasks=[self._progress_of(t) for t in self.s.outcomes.values()],
            pushes=len(self.s.landed_batches),
            rejected=list(self._refused),
        )

    def _refresh_details(self) -> None:
        c = self._counts()
        running = [f"{t} ({self._stages[t]})" if t in self._stages else t for t in list(self._running)[:10]]
        st = self.s.stats
        judged = st.judge_approved + st.judge_revised + st.judge_rejected
        workflow.set_current_details(
            f"**{self.params.board.name}** on `{self.params.repo}`\n\n"
            f"- pending {c[TASK_PENDING]}, running {c[TASK_RUNNING]} (max {self.max_parallel})\n"
            f"- succeeded {c[TASK_SUCCEEDED]}, failed {c[TASK_FAILED]}, cancelled {c[TASK_CANCELLED]}\n"
            f"- landed {c['landed']} in {self._pushes()} push(es)\n"
            + (f"- running: {', '.join(running)}\n" if running else "")
            + (self._queue_details() if self._queued else "")
            + (f"- judge: approve {st.judge_approved}, revise {st.judge_revised}, reject {st.judge_rejected}\n"
               if judged else "")
        )

    def _result(self, tasks: list[TaskOutcome]) -> OrchestratorResult:
        stats = self.s.stats
        started = datetime.fromisoformat(self.s.started_at)
        stats.wall_seconds = round((workflow.now() - started).total_seconds(), 3)
        # Speed-up over the tasks' own work (executor + verification), not over time spent waiting
        # for taskfleet: that is reported per task beside it.
        stats.speedup = round(stats.work_seconds / stats.wall_seconds, 2) if stats.wall_seconds else 0.0
        done = self._tally[TASK_SUCCEEDED] + self._tally[TASK_FAILED]
        if done:
            own = max(stats.task_seconds - stats.work_seconds, 0.0) + stats.wait_seconds + stats.landing_seconds
            stats.overhead_seconds_per_task = round(own / done, 4)
        stats.pushes = self._pushes()
        stats.network_savings = max(self._tally["landed"] - stats.pushes, 0)
        stats.largest_history_length = max(stats.largest_history_length, workflow.info().get_current_history_length())
        p = self.s.paging
        if p is None:
            return OrchestratorResult(tasks=tasks, stats=stats)
        return OrchestratorResult(tasks=tasks, stats=stats, run_ref=p.run_ref, repo=self.params.repo,
                                  recorded=p.recorded, counts=dict(self._tally), failed_ids=list(p.failed_ids))
