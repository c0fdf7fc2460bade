"""A task's judge, asked from the workflow that runs the task's rounds: a `judge_run` command is one
activity (in a worktree of the task's commit), a Claude judge a `JudgeWorkflow` child. Also what
every task workflow does around it: report the task's stage, land an approved commit, and add each
round's judging to the task's result."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError, ChildWorkflowError
from temporalio.workflow import ActivityCancellationType, ChildWorkflowCancellationType

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.llm_ids import judge_workflow_id
    from taskfleet.core.models.judge import (
        JUDGE_BY_CLAUDE,
        JUDGE_BY_COMMAND,
        JudgeOutcome,
        JudgeRequest,
        LandInput,
        judged_task,
    )
    from taskfleet.core.models.orchestrator import TaskInput, TaskResult
    from taskfleet.core.models.payload import compact
    from taskfleet.core.models.review import JudgeTally, TaskStage
    from taskfleet.core.names import (
        ACTIVITY_JUDGE_COMMAND,
        ACTIVITY_LAND_TASK,
        JUDGE_WORKFLOW,
        SIGNAL_TASK_STAGE,
    )

from taskfleet.workflows.signals_out import send_signal

JUDGE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1),
                          maximum_interval=timedelta(seconds=20), maximum_attempts=3,
                          non_retryable_error_types=["BadTaskSetup", "TemplateError"])
LAND_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1),
                         maximum_interval=timedelta(seconds=30), maximum_attempts=5)
HEARTBEAT = timedelta(seconds=60)


def _cancelled(err: BaseException) -> bool:
    return isinstance(err.cause, CancelledError)


async def judge(request: JudgeRequest) -> JudgeOutcome:
    """The verdict on `request.commit`, or a `JudgeOutcome` whose `error` says why there is none."""
    about = judged_task(request)
    if request.task_input is not None and request.task_input.task.judge_run.strip():
        task = request.task_input.task
        try:
            return await workflow.execute_activity(
                ACTIVITY_JUDGE_COMMAND, request, result_type=JudgeOutcome,
                start_to_close_timeout=timedelta(seconds=2 * task.timeout_seconds + 120),
                heartbeat_timeout=HEARTBEAT, retry_policy=JUDGE_RETRY,
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=f"{task.id}: judge_run (round {request.round})"[:100])
        except ActivityError as err:
            if _cancelled(err):
                raise
            return JudgeOutcome(error=f"the judge command could not run: {root_cause_message(err)}",
                                source=JUDGE_BY_COMMAND)
    try:
        return await workflow.execute_child_workflow(
            JUDGE_WORKFLOW, compact(request), result_type=JudgeOutcome,
            id=judge_workflow_id(about.reply_to, about.id, request.round),
            cancellation_type=ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
            static_summary=f"{about.id}: judge (round {request.round})"[:200],
        )
    except ChildWorkflowError as err:
        if _cancelled(err):
            raise
        return JudgeOutcome(error=f"the judge failed: {root_cause_message(err)}",
                            source=JUDGE_BY_CLAUDE)


def add_judging(total: JudgeTally, outcome: JudgeOutcome) -> None:
    """One round's judging added to the task's."""
    t = outcome.tally
    for name in ("calls", "cache_hits", "approved", "revised", "rejected", "invalid",
                 "direct_calls", "input_tokens", "output_tokens", "cache_read_tokens"):
        setattr(total, name, getattr(total, name) + getattr(t, name))
    total.batch_ids += [b for b in t.batch_ids if b not in total.batch_ids]
    total.cost_usd = round(total.cost_usd + t.cost_usd, 6)


def with_judging(result: TaskResult, total: JudgeTally, verdict: str,
                 by_claude: bool) -> TaskResult:
    """The task's result with its judging: the tally, the last verdict, and a Claude judge's
    requests added to the task's (the run's `llm_*` figures count every Claude request)."""
    result.judge, result.verdict = total, verdict
    if not by_claude:
        return result
    result.llm_requests += total.calls
    result.llm_direct_calls += total.direct_calls
    result.llm_batch_ids = result.llm_batch_ids + [b for b in total.batch_ids
                                                   if b not in result.llm_batch_ids]
    result.llm_input_tokens += total.input_tokens
    result.llm_output_tokens += total.output_tokens
    result.llm_cache_read_tokens += total.cache_read_tokens
    result.llm_cost_usd = round(result.llm_cost_usd + total.cost_usd, 6)
    return result


async def report_stage(task_input: TaskInput, stage: str, verdict: str = "") -> None:
    """Tell the orchestrator (`reply_to`) that the task moved on; never fails the task."""
    try:
        await send_signal(task_input.reply_to, SIGNAL_TASK_STAGE,
                          TaskStage(task_id=task_input.task.id, stage=stage, verdict=verdict))
    except Exception as err:  # noqa: BLE001 - a stage is for people watching; the task goes on
        workflow.logger.warning("could not report stage %s of %s: %s", stage,
                                task_input.task.id, err)


async def land(land_input: LandInput, local: bool = False) -> str:
    """Send an approved commit's landing op (push, merge, ...): the op id the orchestrator waits
    for. `local`: as a local activity (short, and its input, the task's, stays out of history)."""
    summary = f"{land_input.task_input.task.id}: land the approved commit"[:100]
    run = workflow.execute_local_activity if local else workflow.execute_activity
    return await run(ACTIVITY_LAND_TASK, land_input, result_type=str,
                     start_to_close_timeout=timedelta(minutes=2), retry_policy=LAND_RETRY,
                     summary=summary)
