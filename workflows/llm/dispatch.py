"""The orchestrator's side of the Claude implementer: run one task as `LLMTaskWorkflow` (a child),
and add its API accounting to the task's outcome and the run's stats."""

from __future__ import annotations

from temporalio import workflow
from temporalio.workflow import ChildWorkflowCancellationType

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.boards import ANTHROPIC
    from taskfleet.core.llm_ids import llm_task_workflow_id
    from taskfleet.core.models.llm import LLMTaskInput
    from taskfleet.core.models.orchestrator import (
        OrchestratorState,
        TaskInput,
        TaskOutcome,
        TaskResult,
    )
    from taskfleet.core.models.payload import compact
    from taskfleet.core.names import LLM_TASK_WORKFLOW

__all__ = ["ANTHROPIC", "add_judge_usage", "add_llm_usage", "run_llm_task"]


async def run_llm_task(task_input: TaskInput, summary: str) -> TaskResult:
    """The same `TaskResult` as `taskfleet_run_task` (landing op id and commit included)."""
    return await workflow.execute_child_workflow(
        LLM_TASK_WORKFLOW,
        compact(LLMTaskInput(task_input=task_input, stored=True)),
        # A re-run after the merge queue sent the change back is a task workflow of its own.
        id=llm_task_workflow_id(workflow.info().workflow_id, task_input.task.id)
        + (f"/queue-{task_input.queue.attempt}"
           if task_input.queue is not None and task_input.queue.attempt else ""),
        result_type=TaskResult,
        cancellation_type=ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
        static_summary=summary,
    )


def add_llm_usage(state: OrchestratorState, outcome: TaskOutcome, result: TaskResult) -> None:
    if not result.llm_requests:
        return
    outcome.llm_requests = result.llm_requests
    outcome.llm_input_tokens = result.llm_input_tokens
    outcome.llm_output_tokens = result.llm_output_tokens
    outcome.llm_cache_read_tokens = result.llm_cache_read_tokens
    outcome.llm_cost_usd = result.llm_cost_usd
    stats = state.stats
    new_batches = [b for b in result.llm_batch_ids if b not in state.llm_batch_ids]
    state.llm_batch_ids.extend(new_batches)
    stats.llm_api_calls += result.llm_direct_calls + len(new_batches)
    stats.llm_requests += result.llm_requests
    stats.llm_input_tokens += result.llm_input_tokens
    stats.llm_output_tokens += result.llm_output_tokens
    stats.llm_cache_read_tokens += result.llm_cache_read_tokens
    stats.llm_cost_usd = round(stats.llm_cost_usd + result.llm_cost_usd, 6)


def add_judge_usage(state: OrchestratorState, outcome: TaskOutcome, result: TaskResult) -> None:
    """A judged task's verdict on its outcome, its judging in the run's `judge_*` figures."""
    outcome.verdict = result.verdict
    tally = result.judge
    if tally is None:
        return
    stats = state.stats
    new_batches = [b for b in tally.batch_ids if b not in state.judge_batch_ids]
    state.judge_batch_ids.extend(new_batches)
    stats.judge_calls += tally.calls
    stats.judge_api_calls += tally.direct_calls + len(new_batches)
    stats.judge_cache_hits += tally.cache_hits
    stats.judge_approved += tally.approved
    stats.judge_revised += tally.revised
    stats.judge_rejected += tally.rejected
    stats.judge_invalid += tally.invalid
    stats.judge_input_tokens += tally.input_tokens
    stats.judge_output_tokens += tally.output_tokens
    stats.judge_cost_usd = round(stats.judge_cost_usd + tally.cost_usd, 6)
