"""What an orchestrator run carries into the next when it continues as new, and when it does.

History stays bounded: past the server's suggestion (or the board's `max_history_events`) the
workflow stops dispatching, lets running tasks finish, and continues as new with only what is not
done yet. An inline run carries its pending tasks and compact outcomes; a paged run carries no
task and no finished outcome, only where it is on its stored board (the row to load from, the
tasks still landing, tasks the merge queue sent back) and its counters.

A mixin of `OrchestratorWorkflow` (workflows/orchestrator.py), whose state and helpers it uses.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Optional

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.models.orchestrator import OrchestratorInput, OrchestratorResult, OrchestratorState

from taskfleet.workflows.orchestrator_recorder import OutcomeRecorder

REASON_CARRIED_CHARS = 300  # of each outcome's reason an inline run carries


class CarryMixin:
    """Mixed into `OrchestratorWorkflow`, which provides `_paged` and `_carry_requeued`."""

    params: OrchestratorInput
    s: OrchestratorState
    _rows: dict[str, int]
    _loader: Optional[asyncio.Task]
    _run_store: OutcomeRecorder

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        length = info.get_current_history_length()
        self.s.stats.largest_history_length = max(self.s.stats.largest_history_length, length)
        if info.is_continue_as_new_suggested():
            return True
        limit = self.params.max_history_events
        return bool(limit) and length >= limit

    async def _continue_as_new(self) -> OrchestratorResult:
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self._paged:
            return await self._continue_paged()
        self.s.stats.runs += 1
        pending = set(self.s.pending)
        board = self.params.board
        board.tasks = [t for t in board.tasks if t.id in pending]  # only what is not done yet
        for outcome in self.s.outcomes.values():
            # Compact: the next run's input must stay well under the payload limit at 2,000 tasks.
            outcome.log_path = ""
            outcome.reason = outcome.reason[:REASON_CARRIED_CHARS]
        workflow.logger.info("continuing as new with %d pending tasks", len(pending))
        workflow.continue_as_new(
            OrchestratorInput(**{**self.params.__dict__, "board": board, "state": self.s, "first_page": None})
        )

    async def _continue_paged(self) -> OrchestratorResult:
        """Continue as new with where the run is on its board: no tasks, no finished outcomes."""
        if self._loader is not None:
            await self._loader
        await self._run_store.flush()
        p = self.s.paging
        requeued = self._carry_requeued()
        fresh = [t for t in self.s.pending if t not in requeued]
        if fresh:  # loaded, never started: the next run loads them again
            p.load_from = self._rows[fresh[0]]
        self.s.pending = requeued
        p.awaiting_rows = {task_id: self._rows.get(task_id, -1) for task_id in self.s.outcomes}
        self.s.stats.runs += 1
        workflow.logger.info("continuing as new from row %d of %d", p.load_from, p.board.tasks)
        workflow.continue_as_new(OrchestratorInput(**{
            **self.params.__dict__, "board": replace(self.params.board, tasks=[]), "board_ref": p.board, "state": self.s,
            "first_page": None,
        }))
