"""`RunState`: what every part of an orchestrator run reads and changes, in one object. The carried
state (`s`) travels across continue-as-new; the rest is this run's: tasks loaded, running ones,
their stages, counts by status (kept as statuses change, so views cost the same at any size) and
outcomes on their way to the run store."""

from __future__ import annotations

import asyncio
from typing import Optional

from temporalio import workflow

from taskfleet.workflows.long_lived import continue_as_new_due
from taskfleet.workflows.orchestrator.recorder import OutcomeRecorder

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.models.orchestrator import (
        TASK_CANCELLED,
        TASK_FAILED,
        TASK_PENDING,
        TASK_RUNNING,
        TASK_SUCCEEDED,
        OrchestratorInput,
        OrchestratorState,
        TaskOutcome,
        TaskSpec,
    )

STATUSES = (TASK_PENDING, TASK_RUNNING, TASK_SUCCEEDED, TASK_FAILED, TASK_CANCELLED)


class RunState:
    def __init__(self, params: OrchestratorInput) -> None:
        self.params = params
        board = params.board
        for task in board.tasks:  # the same default the board parser applies
            task.branch = task.branch or f"task/{task.id}"
        self.tasks: dict[str, TaskSpec] = {t.id: t for t in board.tasks}
        self.s = params.state or OrchestratorState(
            pending=[t.id for t in board.tasks if not t.done],
            outcomes={t.id: TaskOutcome(id=t.id) for t in board.tasks if not t.done},
        )
        self.max_parallel = params.max_parallel or board.max_parallel
        self.running: dict[str, asyncio.Task] = {}  # task id -> what runs it (a group runs several)
        # Running tasks' stages; not carried across continue-as-new (each reports its next again).
        self.stages: dict[str, str] = {}
        self.draining = False  # continue-as-new is due: start nothing more
        self.recorder = OutcomeRecorder(params.repo, self.s)  # finished ones, to the run store
        self.rows: dict[str, int] = {}  # task id -> its stored board row (loaded, not finished)
        if self.s.paging is not None:  # the counts travel in the state, since outcomes do not
            self.tally = self.s.paging.counts
            self.rows = dict(self.s.paging.awaiting_rows)
            return
        self.tally = {name: 0 for name in STATUSES} | {"landed": 0}
        for outcome in self.s.outcomes.values():
            self.tally[outcome.status] += 1
            self.tally["landed"] += outcome.landed

    @property
    def paged(self) -> bool:
        """A board stored in the clone, read a page at a time (every run this version starts)."""
        return self.s.paging is not None

    @property
    def task_queue(self) -> str:
        """Where this run's tasks, batcher and merge queue run: the workers that serve the run."""
        return self.params.git_task_queue or workflow.info().task_queue

    def set_status(self, outcome: TaskOutcome, status: str, reason: Optional[str] = None) -> None:
        self.tally[outcome.status] -= 1
        self.tally[status] += 1
        outcome.status = status
        if reason is not None:
            outcome.reason = reason

    def after_task(self, task_id: str) -> None:
        """A paged run records a task's outcome once it is final: finished, and landed or not."""
        if not self.paged or task_id in self.running or task_id not in self.s.outcomes:
            return
        if (task_id in self.s.awaiting_landing.values()
                or self.s.outcomes[task_id].status == TASK_PENDING):
            return  # landing, or sent back by the merge queue to run again
        outcome = self.s.outcomes.pop(task_id)
        self.tasks.pop(task_id, None)
        self.recorder.record(outcome, self.rows.pop(task_id, -1))

    def continue_due(self) -> bool:
        """At the server's suggestion (or past the board's `max_history_events`)."""
        stats = self.s.stats
        stats.largest_history_length = max(stats.largest_history_length,
                                           workflow.info().get_current_history_length())
        return continue_as_new_due(self.params.max_history_events)
