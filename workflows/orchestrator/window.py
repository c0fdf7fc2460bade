"""The run's sliding window over its board: start a task whenever a slot is free, take its result.
A stored board loads a page at a time (the next while the last still has tasks to start); an inline
board is one page. A task is one `run_task` activity, a Claude child workflow, or rounds with the
judge; tasks without a worktree go many to one activity (a task group)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, Optional

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
)
from temporalio.workflow import ActivityCancellationType

from taskfleet.workflows.compat import activity_name
from taskfleet.workflows.judge.rounds import run_judged_task
from taskfleet.workflows.llm.dispatch import ANTHROPIC, add_judge_usage, add_llm_usage, run_llm_task
from taskfleet.workflows.orchestrator.checks import STORE_RETRY, claim_page, store_inline_board
from taskfleet.workflows.orchestrator.landings import Landings
from taskfleet.workflows.orchestrator.recorder import BACKLOG_OUTCOMES
from taskfleet.workflows.orchestrator.run import RunState

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.boards import BoardError, has_judge, validate_board
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.ids import landing_op_id
    from taskfleet.core.models.board_store import BoardPage, BoardPageRequest
    from taskfleet.core.models.orchestrator import (
        TASK_CANCELLED,
        TASK_FAILED,
        TASK_PENDING,
        TASK_RUNNING,
        TASK_SUCCEEDED,
        OrchestratorInput,
        TaskInput,
        TaskOutcome,
        TaskResult,
        TaskSpec,
    )
    from taskfleet.core.models.paging import PagingState
    from taskfleet.core.models.review import STAGE_IMPLEMENTING
    from taskfleet.core.models.task_group import GROUP_MAX_TASKS, TaskGroupInput, TaskGroupResult
    from taskfleet.core.names import (
        ACTIVITY_LOAD_BOARD_PAGE,
        ACTIVITY_RUN_TASK,
        ACTIVITY_RUN_TASK_GROUP,
    )
    from taskfleet.core.store_refs import run_ref

TASK_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=20),
    maximum_attempts=3,
    non_retryable_error_types=["BadTaskSetup", "TemplateError"],
)
LAND_TOGETHER_MAX = 64  # the most last tasks whose landing ops ask for a flush together
PREFETCH_BELOW = 200  # tasks left to start from the loaded pages when the next page is asked for
GROUP_MAX_BYTES = 96 * 1024  # of task specs in one group's input


def task_summary(task: TaskSpec) -> str:
    """`T2.3: Prompt template caching`: the task id and the head of its scope, for the UI."""
    head = task.scope.split(":")[0].strip()
    return f"{task.id}: {head}"[:100] if head else task.id


class Window:
    def __init__(self, run: RunState, landings: Landings, on_change: Callable[[], None]) -> None:
        self.run = run
        self.s = run.s
        self.landings = landings
        self._on_change = on_change
        self._loader: Optional[asyncio.Task] = None  # the next page, being loaded
        self._started_here = 0  # a run starts some before it may continue as new

    # --- the window ----------------------------------------------------------------------------

    async def dispatch(self) -> None:
        """Start a task whenever a slot is free, until none is left to load or start (or
        continue-as-new is due); then wait for the running ones."""
        run, s = self.run, self.s
        while True:
            if not s.pending:
                p = s.paging
                if p is None:
                    break  # an inline board: its one page is loaded
                if self._loader is None:
                    if p.load_from >= p.board.tasks:
                        break
                    if self._started_here and run.continue_due():
                        run.draining = True
                        break
                    self._loader = asyncio.create_task(self._load_page())
                await self._loader
                continue
            await workflow.wait_condition(lambda: len(run.running) < run.max_parallel
                                          and run.recorder.backlog < BACKLOG_OUTCOMES)
            if (self._started_here or not run.paged) and run.continue_due():
                run.draining = True
                break
            self._start_next()
            self._started_here += 1
            s.stats.max_running = max(s.stats.max_running, len(run.running))
            p = s.paging
            if p is not None and len(s.pending) < PREFETCH_BELOW and self._loader is None \
                    and p.load_from < p.board.tasks:
                self._loader = asyncio.create_task(self._load_page())
            self._on_change()
        await workflow.wait_condition(lambda: not run.running)

    def _start_next(self) -> None:
        run, s = self.run, self.s
        if not run.paged:
            task_id = s.pending.pop(0)
            run.running[task_id] = asyncio.create_task(self._run_one(run.tasks[task_id]))
            return
        free = run.max_parallel - len(run.running)
        group: list[TaskSpec] = []
        size, most = 0, min(GROUP_MAX_TASKS, max(1, run.max_parallel // 4), free)  # >= 4 groups
        while s.pending and len(group) < most and self._groupable(run.tasks[s.pending[0]]):
            cost = len(json.dumps(vars(run.tasks[s.pending[0]])))
            if group and size + cost > GROUP_MAX_BYTES:
                break  # the group's input stays one small payload
            group.append(run.tasks[s.pending.pop(0)])
            size += cost
        if len(group) > 1:
            handle = asyncio.create_task(self._run_group(group))
            for task in group:
                s.outcomes[task.id] = TaskOutcome(id=task.id)
                run.running[task.id] = handle
            s.paging.group_runs += 1
            return
        task = group[0] if group else run.tasks[s.pending.pop(0)]
        s.outcomes[task.id] = TaskOutcome(id=task.id)
        run.running[task.id] = asyncio.create_task(self._run_one(task))

    @staticmethod
    def _groupable(task: TaskSpec) -> bool:
        return not task.worktree and not getattr(task, "implementer", "")

    # --- one task, or a group ------------------------------------------------------------------

    def task_input(self, task: TaskSpec) -> TaskInput:
        params, info = self.run.params, workflow.info()
        return self.landings.task_input(
            TaskInput(task=task, repo=params.repo, remote=params.remote, base=params.board.base,
                      land=params.board.land, run_key=self.s.run_key, reply_to=info.workflow_id,
                      git_task_queue=self.run.task_queue,
                      git_max_batch_size=params.git_max_batch_size,
                      git_max_batch_age_seconds=params.git_max_batch_age_seconds,
                      land_together=self._last_landings()))

    def _last_landings(self) -> list[str]:
        """Once no task is left to start: the landing op ids of running tasks that land through
        the git batcher (the caller's too); none past LAND_TOGETHER_MAX (batches fill by size)."""
        s, p = self.s, self.s.paging
        if self.landings.queued or s.pending or (p is not None and p.load_from < p.board.tasks):
            return []
        landing = [task_id for task_id in self.run.running if self.run.tasks[task_id].worktree]
        if len(landing) > LAND_TOGETHER_MAX:
            return []
        return sorted(landing_op_id(s.run_key, task_id) for task_id in landing)

    async def _run_one(self, task: TaskSpec) -> None:
        run = self.run
        outcome = self.s.outcomes[task.id]
        run.set_status(outcome, TASK_RUNNING)
        heartbeat = self.run.params.heartbeat_timeout_seconds
        try:
            task_input = self.task_input(task)
            run.stages[task.id] = STAGE_IMPLEMENTING
            if task.implementer == ANTHROPIC:  # a child workflow
                result = await run_llm_task(task_input, task_summary(task))
            elif has_judge(task):  # rounds of run_task and the judge, then landing
                result = await run_judged_task(
                    task_input, task_summary(task), TASK_RETRY, heartbeat,
                    lambda stage, verdict: self.on_stage(task.id, stage, verdict))
            else:
                result = await workflow.execute_activity(
                    activity_name(ACTIVITY_RUN_TASK), task_input, result_type=TaskResult,
                    start_to_close_timeout=timedelta(seconds=2 * task.timeout_seconds + 120),
                    heartbeat_timeout=timedelta(seconds=heartbeat), retry_policy=TASK_RETRY,
                    cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                    summary=task_summary(task),
                )
        except asyncio.CancelledError:
            run.set_status(outcome, TASK_CANCELLED, "cancelled")
        except (ActivityError, ChildWorkflowError) as err:
            if isinstance(err.cause, CancelledError):
                run.set_status(outcome, TASK_CANCELLED, "cancelled")
            else:
                run.set_status(outcome, TASK_FAILED, root_cause_message(err))
            workflow.logger.warning("task %s: %s", task.id, outcome.reason)
        else:
            self._apply_result(task, outcome, result)
        finally:
            run.running.pop(task.id, None)
            run.stages.pop(task.id, None)
            run.after_task(task.id)
            self._on_change()

    async def _run_group(self, tasks: list[TaskSpec]) -> None:
        """Tasks without a worktree, several in one activity; each gets its own result."""
        run = self.run
        outcomes = [self.s.outcomes[t.id] for t in tasks]
        for outcome in outcomes:
            run.set_status(outcome, TASK_RUNNING)
        summary = f"{len(tasks)} tasks: {tasks[0].id} .. {tasks[-1].id}"
        try:
            grouped: TaskGroupResult = await workflow.execute_activity(
                ACTIVITY_RUN_TASK_GROUP,
                # The template's own task is never run: a bare one keeps the payload to the tasks.
                TaskGroupInput(template=self.task_input(TaskSpec(id=tasks[0].id)), tasks=tasks),
                result_type=TaskGroupResult,
                start_to_close_timeout=timedelta(
                    seconds=2 * max(t.timeout_seconds for t in tasks) + 120),
                heartbeat_timeout=timedelta(seconds=run.params.heartbeat_timeout_seconds),
                retry_policy=TASK_RETRY,
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=summary[:100],
            )
        except asyncio.CancelledError:
            for outcome in outcomes:
                run.set_status(outcome, TASK_CANCELLED, "cancelled")
        except ActivityError as err:
            cancelled = isinstance(err.cause, CancelledError)
            for outcome in outcomes:
                run.set_status(outcome, TASK_CANCELLED if cancelled else TASK_FAILED,
                               "cancelled" if cancelled else root_cause_message(err))
            workflow.logger.warning("group %s: %s", summary, outcomes[0].reason)
        else:
            results = {r.id: r for r in grouped.results}
            for task, outcome in zip(tasks, outcomes):
                result = results.get(task.id) or TaskResult(id=task.id, status=TASK_FAILED,
                                                             reason="its group returned no result")
                self._apply_result(task, outcome, result)
        finally:
            for task in tasks:
                run.running.pop(task.id, None)
                run.after_task(task.id)
            self._on_change()

    def on_stage(self, task_id: str, stage: str, verdict: str = "") -> None:
        """A running task moved on (its own steps said so); its last verdict goes on its outcome."""
        if task_id not in self.run.running:
            return
        self.run.stages[task_id] = stage
        outcome = self.s.outcomes.get(task_id)
        if outcome is not None and verdict:
            outcome.verdict = verdict
        self._on_change()

    def _apply_result(self, task: TaskSpec, outcome: TaskOutcome, result: TaskResult) -> None:
        self.run.set_status(outcome, result.status)
        outcome.commit, outcome.seconds, outcome.reason = (result.commit, result.seconds,
                                                           result.reason)
        outcome.cache_hit, outcome.log_path = result.cache_hit, result.log_path
        stats = self.s.stats
        stats.task_seconds += result.seconds
        stats.work_seconds += (result.exec_seconds or 0.0) + (result.verify_seconds or 0.0)
        stats.setup_seconds += result.setup_seconds
        stats.wait_seconds += result.wait_seconds
        add_llm_usage(self.s, outcome, result)
        add_judge_usage(self.s, outcome, result)
        if result.agent_reports:  # what a command task's own agent reported it cost
            outcome.agent_cost_usd = round(outcome.agent_cost_usd + result.agent_cost_usd, 6)
            stats.agent_reports += result.agent_reports
            stats.agent_input_tokens += result.agent_input_tokens
            stats.agent_output_tokens += result.agent_output_tokens
            stats.agent_cost_usd = round(stats.agent_cost_usd + result.agent_cost_usd, 6)
        if result.status == TASK_SUCCEEDED:
            stats.cache_hits += int(result.cache_hit)
            stats.cache_misses += int(not result.cache_hit and not result.resumed)
            if result.landing_op_id and not outcome.landed:
                self.landings.expect(task.id, result)

    # --- a board stored in the clone -----------------------------------------------------------

    async def start_paging(self) -> None:
        """Become a paged run: the board's tasks live in the clone, outcomes in the run store."""
        run, params, info = self.run, self.run.params, workflow.info()
        reference = params.board_ref
        if reference is None:
            reference = await store_inline_board(params)
            params.board = replace(params.board, tasks=[])
        run.tasks.clear()
        self.s.pending, self.s.outcomes = [], {}
        run.tally.update({name: 0 for name in run.tally})
        run.tally[TASK_PENDING] = reference.open_tasks
        self.s.paging = PagingState(
            board=reference, run_ref=run_ref(info.workflow_id, info.first_execution_run_id),
            counts=run.tally)

    async def _load_page(self) -> None:
        run, p, params = self.run, self.s.paging, self.run.params
        page = self._take_first_page()
        if page is None:
            try:
                page = await workflow.execute_activity(
                    ACTIVITY_LOAD_BOARD_PAGE,
                    BoardPageRequest(repo=params.repo, board_id=p.board.board_id,
                                     start=p.load_from),
                    result_type=BoardPage, start_to_close_timeout=timedelta(seconds=120),
                    retry_policy=STORE_RETRY, summary=f"board rows {p.load_from}+",
                )
            except ActivityError as err:
                raise ApplicationError(f"board {p.board.board_id[:12]} cannot be read from "
                                       f"{params.repo}: {root_cause_message(err)}",
                                       type="BoardStoreError", non_retryable=True) from None
        for refused in page.refused:
            if refused.index >= p.accounted:  # not counted yet (a resumed run reloads rows)
                self._fail_unstarted(TaskOutcome(id=refused.id, status=TASK_FAILED,
                                                 reason=refused.reason), refused.index)
        tasks = [(t, row) for t, row in zip(page.tasks, page.rows)
                 if t.id not in run.tasks and t.id not in self.s.outcomes]
        held = await claim_page(params, [t for t, _ in tasks if t.worktree], first=p.accounted == 0)
        for task, row in tasks:
            if task.branch in held:
                self._fail_unstarted(
                    TaskOutcome(id=task.id, status=TASK_FAILED, reason=held[task.branch]), row)
                continue
            run.tasks[task.id] = task
            run.rows[task.id] = row
            self.s.pending.append(task.id)
        p.accounted = max(p.accounted, page.next)
        p.load_from = page.next
        self._loader = None

    def _fail_unstarted(self, outcome: TaskOutcome, row: int) -> None:
        self.run.tally[TASK_PENDING] -= 1
        self.run.tally[TASK_FAILED] += 1
        self.run.recorder.record(outcome, row)

    def _take_first_page(self) -> Optional[BoardPage]:
        """The first page the client read while storing the board (it came in the input), if this
        is where the run starts and the page holds up; it is used once, never carried on."""
        params, p = self.run.params, self.s.paging
        page, params.first_page = params.first_page, None
        if page is None or p.load_from != 0 or p.accounted != 0:
            return None
        return first_page_to_use(page, p, params.board)

    # --- continue-as-new -----------------------------------------------------------------------

    async def continue_as_new(self) -> None:
        """Continue as new with only what is not done yet (history stays bounded at any size)."""
        await workflow.wait_condition(workflow.all_handlers_finished)
        run, s = self.run, self.s
        if not run.paged:
            carry_inline(run)
        if self._loader is not None:
            await self._loader
        await run.recorder.flush()
        p = s.paging
        requeued = self.landings.carry_requeued()
        fresh = [t for t in s.pending if t not in requeued]
        if fresh:  # loaded, never started: the next run loads them again
            p.load_from = run.rows[fresh[0]]
        s.pending = requeued
        p.awaiting_rows = {task_id: run.rows.get(task_id, -1) for task_id in s.outcomes}
        s.stats.runs += 1
        workflow.logger.info("continuing as new from row %d of %d", p.load_from, p.board.tasks)
        workflow.continue_as_new(_next_input(run.params, board=replace(run.params.board, tasks=[]),
                                             board_ref=p.board, state=s))


REASON_CARRIED_CHARS = 300  # of each outcome's reason an inline run carries


def carry_inline(run: RunState) -> None:
    """An inline run (started before boards were stored) carries its pending tasks and compact
    outcomes (the next run's input stays well under the payload limit at 2,000 tasks)."""
    s = run.s
    s.stats.runs += 1
    pending = set(s.pending)
    board = run.params.board
    board.tasks = [t for t in board.tasks if t.id in pending]
    for outcome in s.outcomes.values():
        outcome.log_path = ""
        outcome.reason = outcome.reason[:REASON_CARRIED_CHARS]
    workflow.logger.info("continuing as new with %d pending tasks", len(pending))
    workflow.continue_as_new(_next_input(run.params, board=board, state=s))


def _next_input(params: OrchestratorInput, **changes: Any) -> OrchestratorInput:
    return OrchestratorInput(**{**params.__dict__, "first_page": None, **changes})


def first_page_to_use(page: BoardPage, p: PagingState, board: Any) -> Optional[BoardPage]:
    """The page if it holds up against the stored board (it crossed the wire unchecked: checked as
    an inline board is); else None, logged, and the page is loaded from the store."""
    try:
        if page.start != 0 or not 0 < page.next <= p.board.tasks or page.total != p.board.tasks:
            raise BoardError(
                f"rows {page.start}..{page.next} of {page.total} do not fit the stored board")
        if page.board_id and page.board_id != p.board.board_id:
            raise BoardError(
                f"it was read from board {page.board_id[:12]}, not {p.board.board_id[:12]}")
        if len(page.rows) != len(page.tasks) or any(not 0 <= r < page.next for r in page.rows) \
                or any(not 0 <= r.index < page.next for r in page.refused):
            raise BoardError("its rows do not match its tasks")
        # Every row of the range is exactly one of: a task, a refused row, a done row.
        rows = sorted(page.rows + [r.index for r in page.refused])
        if len(set(rows)) != len(rows) or page.rows != sorted(page.rows) or page.done < 0 \
                or len(rows) + page.done != page.next - page.start \
                or any(t.done for t in page.tasks):
            raise BoardError("its rows, refused rows and done rows do not add up to its range")
        if page.tasks:
            validate_board(replace(board, tasks=page.tasks), "first page")
    except BoardError as err:
        workflow.logger.warning(
            "the first page in the input is not used (%s): loading it from the store", err)
        return None
    return page
