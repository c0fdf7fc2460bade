"""`LLMTaskWorkflow`: one `implementer = "anthropic"` task of an orchestrator run, as a child workflow.

prepare request -> model (a Message Batch via `LLMBatchWorkflow`, or one direct call) -> apply edits,
verify, commit -> the judge, if the task has one -> land -> a fix round on failure, or a revise round
with the judge's comments in the conversation. Waiting for a batch (minutes to hours) is a
`wait_condition` on a signal here: no activity slot, no worker thread and no worktree is held, and
the wait survives worker restarts. It returns the same `TaskResult` as `taskfleet_run_task`, so the
orchestrator lands and counts both kinds of task the same way.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any, Optional

from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.boards import has_judge
    from taskfleet.core.models.judge import JudgeRequest, LandInput
    from taskfleet.core.models.llm import (
        REPLY_SUCCEEDED,
        ApplyInput,
        FailureInput,
        LLMReply,
        LLMTaskInput,
        PreparedRequest,
    )
    from taskfleet.core.models.orchestrator import TASK_FAILED, TASK_SUCCEEDED, TaskInput, TaskResult
    from taskfleet.core.models.review import (
        STAGE_IMPLEMENTING,
        STAGE_JUDGING,
        STAGE_LANDING,
        STAGE_VERIFYING,
        VERDICT_APPROVE,
        VERDICT_REJECT,
        JudgeTally,
    )
    from taskfleet.core.names import (
        ACTIVITY_LLM_APPLY,
        ACTIVITY_LLM_PREPARE,
        ACTIVITY_LLM_RECORD_FAILURE,
        LLM_TASK_WORKFLOW,
        SIGNAL_LLM_REPLY,
    )
    from taskfleet.core.review_schema import reasons_line, review_text

from taskfleet.workflows.compat import llm_task_reports_stages
from taskfleet.workflows.judging import add_judging, judge, land, report_stage, with_judging
from taskfleet.workflows.model_calls import QUICK, ModelCalls, Route, tool_call

TOOL_RESULT_TAIL = 3000
# Verification heartbeats every second; a worker that vanishes is noticed within this.
APPLY_HEARTBEAT = timedelta(seconds=60)


# Worker Versioning: PINNED, like the orchestrator that starts it: one task's steps (prepare,
# wait for the model, apply) run on the code version they started on.
@workflow.defn(name=LLM_TASK_WORKFLOW, versioning_behavior=VersioningBehavior.PINNED)
class LLMTaskWorkflow:
    def __init__(self) -> None:
        self.calls = ModelCalls()
        self.judging = JudgeTally()
        self.verdict = ""
        self.rounds = 0  # judgings so far
        self.reviewed_commit = ""  # the commit the judge last sent back
        self._stages = False
        self.by_claude = True
        self._last_review: Any = None

    @workflow.signal(name=SIGNAL_LLM_REPLY)
    def llm_reply(self, *args: Any) -> None:
        """The batcher's answer; a repeat (a retried delivery) or anything malformed is dropped."""
        self.calls.receive(args)

    @workflow.run
    async def run(self, params: LLMTaskInput) -> TaskResult:
        task_input = params.task_input
        task = task_input.task
        judged = has_judge(task)
        # A task with a judge commits, then waits for the verdict before it lands.
        apply_input = replace(task_input, hold_landing=True) if judged else task_input
        self.result = TaskResult(id=task.id, status=TASK_FAILED)
        self._stages = llm_task_reports_stages()
        self.by_claude = not task.judge_run.strip()
        prepared: PreparedRequest = await workflow.execute_activity(
            ACTIVITY_LLM_PREPARE, task_input, result_type=PreparedRequest,
            start_to_close_timeout=timedelta(minutes=5), retry_policy=QUICK,
        )
        self.model = str(prepared.params.get("model", ""))
        conversation = list(prepared.params["messages"])
        from_cache = prepared.cached_edits is not None
        attempt = 0
        last = TaskResult(id=task.id, status=TASK_FAILED, reason="no attempt made")
        while True:
            reply: Optional[LLMReply] = None
            tool: Optional[dict] = None
            if from_cache:
                edits, summary = prepared.cached_edits, prepared.cached_summary
            else:
                if attempt >= task.max_attempts:
                    break
                attempt += 1
                if attempt > 1:  # the orchestrator shows the first attempt as implementing itself
                    await self._stage(task_input, STAGE_IMPLEMENTING)
                reply = await self._ask(params, prepared, conversation, attempt)
                self._account(reply)
                if reply.type != REPLY_SUCCEEDED:
                    last = self._failed(f"attempt {attempt}: the API reported {reply.type}: {reply.error}",
                                        f"llm_{reply.type}")
                    await self._record(task_input, last)
                    continue
                tool = tool_call(reply.message, "apply_edits")
                if tool is None or not isinstance(tool.get("input"), dict):
                    last = self._failed(f"attempt {attempt}: the model did not call apply_edits", "llm_no_tool")
                    await self._record(task_input, last)
                    conversation += [
                        {"role": "assistant", "content": reply.message.get("content") or [{"type": "text", "text": "-"}]},
                        {"role": "user", "content": [{"type": "text", "text": "Call apply_edits with the edits."}]},
                    ]
                    continue
                edits, summary = tool["input"].get("edits"), str(tool["input"].get("summary", ""))[:1000]
            await self._stage(task_input, STAGE_VERIFYING)
            applied: TaskResult = await workflow.execute_activity(
                ACTIVITY_LLM_APPLY,
                ApplyInput(task_input=apply_input, edits=edits, summary=summary, attempt=attempt,
                           cache_key=prepared.cache_key, from_cache=from_cache, reviewed_commit=self.reviewed_commit),
                result_type=TaskResult,
                start_to_close_timeout=timedelta(seconds=2 * task.timeout_seconds + 120),
                heartbeat_timeout=APPLY_HEARTBEAT,
                retry_policy=QUICK,
                summary=(f"{task.id}: apply edits, verify, commit" + ("" if judged else ", land"))[:100],
            )
            applied.prompt_hash = prepared.prompt_hash
            if applied.status == TASK_SUCCEEDED and judged:
                feedback = await self._judge(task_input, applied, attempt, edits, summary,
                                             prepared.cache_key if not from_cache else "")
                if feedback is None:  # approved and landed, or the task failed for good
                    return self._merged(applied)
                if from_cache:
                    from_cache = False  # the stored edits no longer pass the judge: ask the model after all
                    last = applied
                    continue
                last = applied
                if attempt >= task.max_attempts:
                    applied.status, applied.failure_type = TASK_FAILED, "judge_revise"
                    applied.reason = (f"the judge still asks for changes after {attempt} attempt(s) "
                                      f"(max_attempts {task.max_attempts}): {reasons_line(self._last_review)}")
                    break
                # Revise round: the judge's review as the result of the model's last edits.
                assert tool is not None and reply is not None
                conversation += [
                    {"role": "assistant", "content": reply.message.get("content")},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool.get("id", ""),
                                                  "is_error": True, "content": feedback}]},
                ]
                continue
            if applied.status == TASK_SUCCEEDED:
                return self._merged(applied)
            if from_cache:
                from_cache = False  # the stored edits no longer pass: ask the model after all
                last = applied
                continue
            applied.reason = f"attempt {attempt}: {applied.reason}"
            last = applied
            if tool is not None and reply is not None and attempt < task.max_attempts:
                # Fix round: the conversation so far, and why the edits failed, as an error tool result.
                feedback = applied.reason
                if applied.output_tail:
                    feedback += f"\n\nOutput of the verify command (tail):\n{applied.output_tail[-TOOL_RESULT_TAIL:]}"
                conversation += [
                    {"role": "assistant", "content": reply.message.get("content")},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool.get("id", ""),
                                                  "is_error": True, "content": feedback}]},
                ]
        return self._merged(last)

    async def _judge(self, task_input: TaskInput, applied: TaskResult, attempt: int, edits: Any, summary: str,
                     edits_cache_key: str) -> Optional[str]:
        """Ask the judge about the applied commit. Approve: land it (None). Reject or no verdict:
        `applied` becomes the task's failure (None). Revise: the feedback for the next attempt."""
        self.rounds += 1
        await self._stage(task_input, STAGE_JUDGING)
        outcome = await judge(JudgeRequest(task_input=task_input, commit=applied.commit,
                                           verify_tail=applied.output_tail, round=self.rounds, attempt=attempt))
        add_judging(self.judging, outcome)
        review = outcome.review
        if review is None:
            applied.status, applied.failure_type, applied.reason = TASK_FAILED, "judge_failed", f"judge: {outcome.error}"
            return None
        self.verdict, self._last_review = review.verdict, review
        if review.verdict == VERDICT_APPROVE:
            await self._stage(task_input, STAGE_LANDING)
            applied.landing_op_id = await land(LandInput(task_input=task_input, commit=applied.commit,
                                                         edits_cache_key=edits_cache_key, edits=edits, summary=summary))
            return None
        if review.verdict == VERDICT_REJECT:
            applied.status, applied.failure_type = TASK_FAILED, "judge_rejected"
            applied.reason = f"rejected by the judge: {reasons_line(review)}"
            return None
        self.reviewed_commit = applied.commit
        await self._stage(task_input, STAGE_JUDGING)  # carries the verdict
        return ("Your edits passed verification, but the judge asks for changes. Send corrected edits "
                f"(they apply to the original base again):\n{review_text(review)}")

    async def _stage(self, task_input: TaskInput, stage: str) -> None:
        if self._stages:
            await report_stage(task_input, stage, self.verdict)

    async def _ask(self, params: LLMTaskInput, prepared: PreparedRequest, conversation: list, attempt: int) -> LLMReply:
        task = params.task_input.task
        route = Route(batch=task.llm_batch, max_batch_size=task.llm_batch_max_size,
                      max_batch_age_seconds=task.llm_batch_max_age_seconds)
        return await self.calls.ask({**prepared.params, "messages": conversation}, task.id, attempt, route, task.id)

    def _account(self, reply: LLMReply) -> None:
        self.calls.account(reply, self.model)

    def _failed(self, reason: str, failure_type: str) -> TaskResult:
        return TaskResult(id=self.result.id, status=TASK_FAILED, reason=reason, failure_type=failure_type)

    async def _record(self, task_input: Any, failed: TaskResult) -> None:
        try:
            await workflow.execute_activity(
                ACTIVITY_LLM_RECORD_FAILURE,
                FailureInput(task_input=task_input, failure_type=failed.failure_type, reason=failed.reason),
                start_to_close_timeout=timedelta(minutes=1), retry_policy=RetryPolicy(maximum_attempts=3),
            )
        except ActivityError as err:
            workflow.logger.warning("could not record a lesson: %s", root_cause_message(err))

    def _merged(self, outcome: TaskResult) -> TaskResult:
        """The attempt's result, with the accounting of every call this task made."""
        u = self.calls.usage
        outcome.llm_direct_calls, outcome.llm_batch_ids, outcome.llm_requests = u.direct_calls, list(u.batch_ids), u.requests
        outcome.llm_input_tokens, outcome.llm_output_tokens = u.input_tokens, u.output_tokens
        outcome.llm_cache_read_tokens, outcome.llm_cost_usd = u.cache_read_tokens, u.cost_usd
        if self.rounds:
            with_judging(outcome, self.judging, self.verdict, self.by_claude)
        return outcome
