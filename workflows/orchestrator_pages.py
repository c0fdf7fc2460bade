"""A paged run's tasks in: a board by reference, loaded a page at a time as the window needs tasks.

The board lives in the clone (`taskfleet.core.board_store`); the orchestrator keeps only the tasks
loaded and not finished, so neither its state nor any payload grows with the board. The next page
is loaded while the window still has tasks of the last one to start, tasks without a worktree run
many per activity (a task group), and a task's outcome leaves for the run store
(workflows/orchestrator_recorder.py) once it is final.

A mixin of `OrchestratorWorkflow` (workflows/orchestrator.py), whose state and helpers it uses.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import timedelta
from typing import Any, Optional

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.boards import BoardError, validate_board
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.models.board_store import BoardPage, BoardPageRequest
    from taskfleet.core.models.orchestrator import (
        TASK_FAILED,
        TASK_PENDING,
        OrchestratorInput,
        OrchestratorState,
        TaskOutcome,
        TaskSpec,
    )
    from taskfleet.core.models.paging import PagingState
    from taskfleet.core.models.task_group import GROUP_MAX_TASKS
    from taskfleet.core.names import ACTIVITY_LOAD_BOARD_PAGE
    from taskfleet.core.store_refs import run_ref

from taskfleet.workflows.orchestrator_checks import STORE_RETRY, claim_page, store_inline_board
from taskfleet.workflows.orchestrator_recorder import BACKLOG_OUTCOMES, OutcomeRecorder

PREFETCH_BELOW = 200  # tasks left to start from the loaded pages when the next page is asked for
GROUP_MAX_BYTES = 96 * 1024  # of task specs in one group's input


class BoardPagesMixin:
    """Mixed into `OrchestratorWorkflow`, which provides `_run_one`, `_run_group` (its dispatch),
    `_should_continue_as_new` (its carry), `_refresh_details` (its views) and the tally."""

    params: OrchestratorInput
    s: OrchestratorState
    tasks: dict[str, TaskSpec]
    max_parallel: int
    _running: dict[str, asyncio.Task]
    _draining: bool
    _tally: dict[str, int]
    _rows: dict[str, int]
    _loader: Optional[asyncio.Task]
    _started_here: int
    _run_store: OutcomeRecorder

    @property
    def _paged(self) -> bool:
        return self.s.paging is not None

    async def _start_paging(self) -> None:
        """Become a paged run: the board's tasks live in the clone, outcomes in the run store."""
        params, info = self.params, workflow.info()
        reference = params.board_ref
        if reference is None:
            reference = await store_inline_board(params)
            self.params.board = replace(params.board, tasks=[])
        self.tasks.clear()
        self.s.pending, self.s.outcomes = [], {}
        self._tally.update({name: 0 for name in self._tally})
        self._tally[TASK_PENDING] = reference.open_tasks
        self.s.paging = PagingState(
            board=reference, run_ref=run_ref(info.workflow_id, info.first_execution_run_id), counts=self._tally
        )

    async def _dispatch_pages(self) -> None:
        """The sliding window over a stored board: the next page is loaded while the window still
        has tasks of the last one to start (so it never waits for a page), never more than that."""
        p = self.s.paging
        while True:
            if not self.s.pending:
                if self._loader is None:
                    if p.load_from >= p.board.tasks:
                        break
                    if self._started_here and self._should_continue_as_new():
                        self._draining = True
                        break
                    self._start_loader()
                await self._loader
                continue
            await workflow.wait_condition(
                lambda: len(self._running) < self.max_parallel and self._run_store.backlog < BACKLOG_OUTCOMES
            )
            if self._started_here and self._should_continue_as_new():
                self._draining = True
                break
            free = self.max_parallel - len(self._running)
            group, size = [], 0
            while self.s.pending and len(group) < min(self._group_size(), free) and self._groupable(self.s.pending[0]):
                cost = len(json.dumps(vars(self.tasks[self.s.pending[0]])))
                if group and size + cost > GROUP_MAX_BYTES:
                    break  # the group's input stays one small payload
                group.append(self.tasks[self.s.pending.pop(0)])
                size += cost
            if len(group) > 1:
                handle = asyncio.create_task(self._run_group(group))
                for task in group:
                    self.s.outcomes[task.id] = TaskOutcome(id=task.id)
                    self._running[task.id] = handle
                p.group_runs += 1
            else:
                task = group[0] if group else self.tasks[self.s.pending.pop(0)]
                self.s.outcomes[task.id] = TaskOutcome(id=task.id)
                self._running[task.id] = asyncio.create_task(self._run_one(task))
            self._started_here += 1
            self.s.stats.max_running = max(self.s.stats.max_running, len(self._running))
            if len(self.s.pending) < PREFETCH_BELOW and self._loader is None and p.load_from < p.board.tasks:
                self._start_loader()
            self._refresh_details()
        await workflow.wait_condition(lambda: not self._running)

    def _start_loader(self) -> None:
        self._loader = asyncio.create_task(self._load_page())

    def _group_size(self) -> int:
        """Tasks per group: a quarter of the window (at least four groups in flight), at most 50."""
        return min(GROUP_MAX_TASKS, max(1, self.max_parallel // 4))

    def _groupable(self, task_id: str) -> bool:
        task = self.tasks[task_id]
        return not task.worktree and not getattr(task, "implementer", "")

    async def _load_page(self) -> None:
        p = self.s.paging
        page = self._take_first_page()
        if page is None:
            try:
                page = await workflow.execute_activity(
                    ACTIVITY_LOAD_BOARD_PAGE,
                    BoardPageRequest(repo=self.params.repo, board_id=p.board.board_id, start=p.load_from),
                    result_type=BoardPage, start_to_close_timeout=timedelta(seconds=120), retry_policy=STORE_RETRY,
                    summary=f"board rows {p.load_from}+",
                )
            except ActivityError as err:
                raise ApplicationError(
                    f"board {p.board.board_id[:12]} cannot be read from {self.params.repo}: {root_cause_message(err)}",
                    type="BoardStoreError", non_retryable=True,
                ) from None
        for refused in page.refused:
            if refused.index >= p.accounted:  # not counted yet (a resumed run reloads from its first pending row)
                self._tally[TASK_PENDING] -= 1
                self._tally[TASK_FAILED] += 1
                self._run_store.record(TaskOutcome(id=refused.id, status=TASK_FAILED, reason=refused.reason),
                                       refused.index)
        tasks = [(t, row) for t, row in zip(page.tasks, page.rows) if t.id not in self.tasks and t.id not in self.s.outcomes]
        held = await claim_page(self.params, [t for t, _ in tasks if t.worktree], first=p.accounted == 0)
        for task, row in tasks:
            if task.branch in held:
                self._tally[TASK_PENDING] -= 1
                self._tally[TASK_FAILED] += 1
                self._run_store.record(TaskOutcome(id=task.id, status=TASK_FAILED, reason=held[task.branch]), row)
                continue
            self.tasks[task.id] = task
            self._rows[task.id] = row
            self.s.pending.append(task.id)
        p.accounted = max(p.accounted, page.next)
        p.load_from = page.next
        self._loader = None

    def _take_first_page(self) -> Optional[BoardPage]:
        """The first page the client read while storing the board (it came in the input), if this
        is where the run starts and the page holds up; it is used once, never carried on."""
        page, self.params.first_page = self.params.first_page, None
        p = self.s.paging
        if page is None or p.load_from != 0 or p.accounted != 0:
            return None
        return first_page_to_use(page, p, self.params.board)

    def _after_task(self, task_id: str) -> None:
        """A paged run records a task's outcome once it is final: finished, and landed or not."""
        if not self._paged or task_id in self._running or task_id not in self.s.outcomes:
            return
        if task_id in self.s.awaiting_landing.values() or self.s.outcomes[task_id].status == TASK_PENDING:
            return  # landing, or sent back by the merge queue to run again
        outcome = self.s.outcomes.pop(task_id)
        self.tasks.pop(task_id, None)
        self._run_store.record(outcome, self._rows.pop(task_id, -1))


def first_page_to_use(page: BoardPage, p: PagingState, board: Any) -> Optional[BoardPage]:
    """The page, if it holds up against the stored board; else None (logged), and it is loaded.

    It crossed the wire unchecked by any worker, so it is checked as an inline board is; one
    that does not hold up is dropped and the page loaded from the store (nothing is lost)."""
    try:
        if page.start != 0 or not 0 < page.next <= p.board.tasks or page.total != p.board.tasks:
            raise BoardError(f"rows {page.start}..{page.next} of {page.total} do not fit the stored board")
        if page.board_id and page.board_id != p.board.board_id:
            raise BoardError(f"it was read from board {page.board_id[:12]}, not {p.board.board_id[:12]}")
        if len(page.rows) != len(page.tasks) or any(not 0 <= r < page.next for r in page.rows) \
                or any(not 0 <= r.index < page.next for r in page.refused):
            raise BoardError("its rows do not match its tasks")
        # Every row of the range is exactly one of: a task, a refused row, a done row.
        rows = sorted(page.rows + [r.index for r in page.refused])
        if len(set(rows)) != len(rows) or page.rows != sorted(page.rows) or page.done < 0 \
                or len(rows) + page.done != page.next - page.start or any(t.done for t in page.tasks):
            raise BoardError("its rows, refused rows and done rows do not add up to its range")
        if page.tasks:
            validate_board(replace(board, tasks=page.tasks), "first page")
    except BoardError as err:
        workflow.logger.warning("the first page in the input is not used (%s): loading it from the store", err)
        return None
    return page
