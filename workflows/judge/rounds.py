"""A command task with a judge, run by the orchestrator in rounds: `run_task` (run, verify, commit;
no landing) -> the judge -> approve: land; revise: `run` again from the reviewed commit with the
review in `TASKFLEET_REVIEW_FILE` (the next attempt, within `max_attempts`); reject: the task fails
with the judge's reasons and nothing lands."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Optional

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.models.judge import JudgeRequest, LandInput
    from taskfleet.core.models.orchestrator import (
        TASK_FAILED,
        TASK_SUCCEEDED,
        TaskInput,
        TaskResult,
    )
    from taskfleet.core.models.review import (
        STAGE_IMPLEMENTING,
        STAGE_JUDGING,
        STAGE_LANDING,
        VERDICT_APPROVE,
        VERDICT_REJECT,
        JudgeTally,
        Review,
    )
    from taskfleet.core.names import ACTIVITY_RUN_TASK
    from taskfleet.core.review_schema import reasons_line

from taskfleet.workflows.judge.ask import add_judging, judge, land, with_judging

# A stage change: (stage, the last verdict).
OnStage = Callable[[str, str], None]
SUMMED = ("seconds", "exec_seconds", "verify_seconds", "setup_seconds", "wait_seconds",
          "agent_reports", "agent_input_tokens", "agent_output_tokens", "agent_cost_usd")


async def run_judged_task(task_input: TaskInput, summary: str, retry: RetryPolicy,
                          heartbeat_timeout: float, on_stage: OnStage) -> TaskResult:
    """The task's result after its last round, with every round's judging and time added up."""
    task = task_input.task
    total, verdict = JudgeTally(), ""
    review: Optional[Review] = None
    start, spent = "", TaskResult(id=task.id, status=TASK_FAILED)
    result = TaskResult(id=task.id, status=TASK_FAILED, reason="no attempt made")
    for attempt in range(1, task.max_attempts + 1):
        on_stage(STAGE_IMPLEMENTING, verdict)
        this_round = replace(task_input, hold_landing=True, attempt=attempt, start_commit=start,
                             review=review, report_stages=True)
        try:
            result = await workflow.execute_activity(
                ACTIVITY_RUN_TASK, this_round, result_type=TaskResult,
                start_to_close_timeout=timedelta(seconds=2 * task.timeout_seconds + 120),
                heartbeat_timeout=timedelta(seconds=heartbeat_timeout), retry_policy=retry,
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=(summary if attempt == 1 else f"{summary} (attempt {attempt})")[:100],
            )
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                raise
            result = TaskResult(id=task.id, status=TASK_FAILED, reason=root_cause_message(err))
        _add_time(spent, result)
        if result.status != TASK_SUCCEEDED:
            if attempt > 1:
                result.reason = f"attempt {attempt}: {result.reason}"
            break
        on_stage(STAGE_JUDGING, verdict)
        outcome = await judge(JudgeRequest(task_input=task_input, commit=result.commit,
                                           verify_tail=result.output_tail, round=attempt,
                                           attempt=attempt, stored=True))
        add_judging(total, outcome)
        if outcome.review is None:
            result.status, result.failure_type, result.reason = (
                TASK_FAILED, "judge_failed", f"judge: {outcome.error}")
            break
        review, verdict = outcome.review, outcome.review.verdict
        on_stage(STAGE_JUDGING, verdict)
        if verdict == VERDICT_APPROVE:
            on_stage(STAGE_LANDING, verdict)
            result.landing_op_id = await land(
                LandInput(task_input=task_input, commit=result.commit))
            break
        if verdict == VERDICT_REJECT:
            result.status, result.failure_type = TASK_FAILED, "judge_rejected"
            result.reason = f"rejected by the judge: {reasons_line(review)}"
            break
        if attempt == task.max_attempts:
            result.status, result.failure_type = TASK_FAILED, "judge_revise"
            result.reason = (f"the judge still asks for changes after {attempt} attempt(s) "
                             f"(max_attempts {task.max_attempts}): {reasons_line(review)}")
            break
        start = result.commit  # the revise round builds on what the judge reviewed
    for name in SUMMED:
        setattr(result, name, getattr(spent, name))
    if not (total.calls or total.cache_hits):
        return result  # never judged (its first round failed)
    return with_judging(result, total, verdict, by_claude=not task.judge_run.strip())


def _add_time(spent: TaskResult, result: TaskResult) -> None:
    for name in SUMMED:
        setattr(spent, name, getattr(spent, name) + (getattr(result, name) or 0))
