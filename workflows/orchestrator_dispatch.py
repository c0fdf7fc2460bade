"""The orchestrator's dispatch: start a task whenever a slot is free, run it, and take its result.

One task is one `run_task` activity (worktree, executor, verification, commit), a child workflow
for the built-in Claude implementer, or rounds of `run_task` and the judge; tasks without a worktree
of a paged run go many to one activity (a task group). A result updates the task's outcome and the
run's stats, and a task that sent a landing op waits for its landing
(workflows/orchestrator_landing.py).

A mixin of `OrchestratorWorkflow` (workflows/orchestrator.py), whose state and helpers it uses.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError, ChildWorkflowError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.ids import landing_op_id
    from taskfleet.core.boards import has_judge
    from taskfleet.core.models.orchestrator import (
        TASK_CANCELLED,
        TASK_FAILED,
        TASK_RUNNING,
        TASK_SUCCEEDED,
        OrchestratorInput,
        OrchestratorState,
        TaskInput,
        TaskOutcome,
        TaskResult,
        TaskSpec,
    )
    from taskfleet.core.models.review import STAGE_IMPLEMENTING
    from taskfleet.core.models.task_group import TaskGroupInput, TaskGroupResult
    from taskfleet.core.names import ACTIVITY_RUN_TASK, ACTIVITY_RUN_TASK_GROUP

from taskfleet.workflows.compat import activity_name
from taskfleet.workflows.judged_task import run_judged_task
from taskfleet.workflows.llm_dispatch import ANTHROPIC, add_judge_usage, add_llm_usage, run_llm_task

TASK_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=20),
    maximum_attempts=3,
    non_retryable_error_types=["BadTaskSetup", "TemplateError"],
)
# The most last tasks whose landing ops ask for a flush together (`TaskInput.land_together`).
LAND_TOGETHER_MAX = 64


def task_summary(task: TaskSpec) -> str:
    """`T2.3: Prompt template caching`: the task id and the head of its scope, for the UI."""
    head = task.scope.split(":")[0].strip()
    return f"{task.id}: {head}"[:100] if head else task.id


class TaskDispatchMixin:
    """Mixed into `OrchestratorWorkflow`, which provides `_set_status`, `_should_continue_as_new`,
    `_after_task`, `_expect_landing`, `_queue_input`, `_paged`, `_refresh_details` and the tally."""

    params: OrchestratorInput
    s: OrchestratorState
    tasks: dict[str, TaskSpec]
    max_parallel: int
    _running: dict[str, asyncio.Task]
    _draining: bool
    _stages: dict[str, str]

    async def _dispatch(self) -> None:
        """Sliding window: start a task whenever a slot is free, until none is pending."""
        while self.s.pending:
            await workflow.wait_condition(lambda: len(self._running) < self.max_parallel)
            if self._should_continue_as_new():
                self._draining = True
                break
            task_id = self.s.pending.pop(0)
            self._running[task_id] = asyncio.create_task(self._run_one(self.tasks[task_id]))
            self.s.stats.max_running = max(self.s.stats.max_running, len(self._running))
            self._refresh_details()
        await workflow.wait_condition(lambda: not self._running)

    def _task_input(self, task: TaskSpec) -> TaskInput:
        task_input = TaskInput(
            task=task,
            repo=self.params.repo,
            remote=self.params.remote,
            base=self.params.board.base,
            land=self.params.board.land,
            run_key=self.s.run_key,
            reply_to=workflow.info().workflow_id,
            git_task_queue=self.params.git_task_queue or workflow.info().task_queue,
            git_max_batch_size=self.params.git_max_batch_size,
            git_max_batch_age_seconds=self.params.git_max_batch_age_seconds,
            land_together=self._last_landings(),
        )
        return self._queue_input(task_input) if self._queued else task_input

    def _last_landings(self) -> list[str]:
        """Once no task of the board is left to start: the landing op ids of the tasks running now
        that land through the git batcher (the caller's included); else, or past
        LAND_TOGETHER_MAX tasks (their batches fill by size), none."""
        if self._queued or self.s.pending:
            return []
        if self._paged and self.s.paging.load_from < self.s.paging.board.tasks:
            return []
        landing = [task_id for task_id in self._running if self.tasks[task_id].worktree]
        if len(landing) > LAND_TOGETHER_MAX:
            return []
        return sorted(landing_op_id(self.s.run_key, task_id) for task_id in landing)

    async def _run_one(self, task: TaskSpec) -> None:
        outcome = self.s.outcomes[task.id]
        self._set_status(outcome, TASK_RUNNING)
        try:
            task_input = self._task_input(task)
            self._stages[task.id] = STAGE_IMPLEMENTING
            if task.implementer == ANTHROPIC:  # the built-in Claude implementer runs as a child workflow
                result = await run_llm_task(task_input, task_summary(task))
            elif has_judge(task):  # rounds of run_task and the judge, then landing
                result = await run_judged_task(task_input, task_summary(task), TASK_RETRY,
                                               self.params.heartbeat_timeout_seconds,
                                               lambda stage, verdict: self._on_stage(task.id, stage, verdict))
            else:
                result = await workflow.execute_activity(
                    activity_name(ACTIVITY_RUN_TASK),
                    task_input,
                    result_type=TaskResult,
                    start_to_close_timeout=timedelta(seconds=2 * task.timeout_seconds + 120),
                    heartbeat_timeout=timedelta(seconds=self.params.heartbeat_timeout_seconds),
                    retry_policy=TASK_RETRY,
                    cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                    summary=task_summary(task),
                )
        except asyncio.CancelledError:
            self._set_status(outcome, TASK_CANCELLED, "cancelled")
        except (ActivityError, ChildWorkflowError) as err:
            if isinstance(err.cause, CancelledError):
                self._set_status(outcome, TASK_CANCELLED, "cancelled")
            else:
                self._set_status(outcome, TASK_FAILED, root_cause_message(err))
            workflow.logger.warning("task %s: %s", task.id, outcome.reason)
        else:
            self._apply_result(task, outcome, result)
        finally:
            self._running.pop(task.id, None)
            self._stages.pop(task.id, None)
            self._after_task(task.id)
            self._refresh_details()

    async def _run_group(self, tasks: list[TaskSpec]) -> None:
        """Tasks without a worktree, several in one activity; each gets its own result."""
        outcomes = [self.s.outcomes[t.id] for t in tasks]
        for outcome in outcomes:
            self._set_status(outcome, TASK_RUNNING)
        summary = f"{len(tasks)} tasks: {tasks[0].id} .. {tasks[-1].id}"
        try:
            grouped: TaskGroupResult = await workflow.execute_activity(
                ACTIVITY_RUN_TASK_GROUP,
                # The template's own task is never run: a bare one keeps the payload to the tasks.
                TaskGroupInput(template=self._task_input(TaskSpec(id=tasks[0].id)), tasks=tasks),
                result_type=TaskGroupResult,
                start_to_close_timeout=timedelta(seconds=2 * max(t.timeout_seconds for t in tasks) + 120),
                heartbeat_timeout=timedelta(seconds=self.params.heartbeat_timeout_seconds),
                retry_policy=TASK_RETRY,
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=summary[:100],
            )
        except asyncio.CancelledError:
            for outcome in outcomes:
                self._set_status(outcome, TASK_CANCELLED, "cancelled")
        except ActivityError as err:
            cancelled = isinstance(err.cause, CancelledError)
            for outcome in outcomes:
                self._set_status(outcome, TASK_CANCELLED if cancelled else TASK_FAILED,
                                 "cancelled" if cancelled else root_cause_message(err))
            workflow.logger.warning("group %s: %s", summary, outcomes[0].reason)
        else:
            results = {r.id: r for r in grouped.results}
            for task, outcome in zip(tasks, outcomes):
                result = results.get(task.id) or TaskResult(id=task.id, status=TASK_FAILED, reason="its group returned no result")
                self._apply_result(task, outcome, result)
        finally:
            for task in tasks:
                self._running.pop(task.id, None)
                self._after_task(task.id)
            self._refresh_details()

    def _on_stage(self, task_id: str, stage: str, verdict: str = "") -> None:
        """A running task moved on (its own steps said so); its last verdict goes on its outcome."""
        if task_id not in self._running:
            return
        self._stages[task_id] = stage
        outcome = self.s.outcomes.get(task_id)
        if outcome is not None and verdict:
            outcome.verdict = verdict
        self._refresh_details()

    def _apply_result(self, task: TaskSpec, outcome: TaskOutcome, result: TaskResult) -> None:
        self._set_status(outcome, result.status)
        outcome.commit, outcome.seconds, outcome.reason = result.commit, result.seconds, result.reason
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
            self.s.stats.cache_hits += int(result.cache_hit)
            self.s.stats.cache_misses += int(not result.cache_hit and not result.resumed)
            if result.landing_op_id and not outcome.landed:
                self._expect_landing(task.id, result)
