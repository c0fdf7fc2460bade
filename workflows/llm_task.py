"""`LLMTaskWorkflow`: one `implementer = "anthropic"` task of an orchestrator run, as a child workflow.

prepare request -> model (a Message Batch via `LLMBatchWorkflow`, or one direct call) -> apply edits,
verify, commit, land -> a fix round on failure. Waiting for a batch (minutes to hours) is a
`wait_condition` on a signal here: no activity slot, no worker thread and no worktree is held, and
the wait survives worker restarts. It returns the same `TaskResult` as `taskfleet_run_task`, so the
orchestrator lands and counts both kinds of task the same way.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, Optional

from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.llm_ids import llm_batch_workflow_id, llm_custom_id
    from taskfleet.core.llm_pricing import estimate_cost
    from taskfleet.core.models.llm import (
        REPLY_EXPIRED,
        REPLY_FAILED,
        REPLY_SUCCEEDED,
        ApplyInput,
        DirectCallInput,
        FailureInput,
        LLMReply,
        LLMRequest,
        LLMTaskInput,
        LLMUsage,
        PreparedRequest,
        SubmitInput,
    )
    from taskfleet.core.models.orchestrator import TASK_FAILED, TASK_SUCCEEDED, TaskResult
    from taskfleet.core.names import (
        ACTIVITY_LLM_APPLY,
        ACTIVITY_LLM_CALL_DIRECT,
        ACTIVITY_LLM_PREPARE,
        ACTIVITY_LLM_RECORD_FAILURE,
        ACTIVITY_LLM_SUBMIT,
        LLM_TASK_WORKFLOW,
        SIGNAL_LLM_REPLY,
    )

QUICK = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30), maximum_attempts=5,
                    non_retryable_error_types=["BadTaskSetup", "TemplateError", "AnthropicNotConfigured"])
API = RetryPolicy(initial_interval=timedelta(seconds=2), maximum_interval=timedelta(seconds=60), maximum_attempts=5,
                  non_retryable_error_types=["AnthropicNotConfigured"])
# A batch ends within 24 h (then its requests expire); past this, taskfleet stops waiting.
REPLY_TIMEOUT = timedelta(hours=26)
TOOL_RESULT_TAIL = 3000
MAX_REPLIES = 1000  # replies kept (a task expects a handful; anything beyond is noise)
# Verification heartbeats every second; a worker that vanishes is noticed within this.
APPLY_HEARTBEAT = timedelta(seconds=60)


def _tool_use(message: dict) -> Optional[dict]:
    for block in message.get("content") or []:
        if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name") == "apply_edits":
            return block
    return None


# Worker Versioning: PINNED, like the orchestrator that starts it: one task's steps (prepare,
# wait for the model, apply) run on the code version they started on.
@workflow.defn(name=LLM_TASK_WORKFLOW, versioning_behavior=VersioningBehavior.PINNED)
class LLMTaskWorkflow:
    def __init__(self) -> None:
        self._replies: dict[str, LLMReply] = {}
        self._waiting_for = ""

    @workflow.signal(name=SIGNAL_LLM_REPLY)
    def llm_reply(self, *args: Any) -> None:
        """The batcher's answer; a repeat (a retried delivery) or anything malformed is dropped."""
        try:
            raw = args[0] if len(args) == 1 else None
            if isinstance(raw, LLMReply):
                reply = raw
            elif isinstance(raw, dict) and isinstance(raw.get("custom_id"), str) and isinstance(raw.get("type"), str):
                usage = raw.get("usage") if isinstance(raw.get("usage"), dict) else {}
                reply = LLMReply(
                    custom_id=raw["custom_id"], type=raw["type"],
                    message=raw.get("message") if isinstance(raw.get("message"), dict) else {},
                    error=str(raw.get("error", ""))[:2000], batch_id=str(raw.get("batch_id", ""))[:200],
                    usage=LLMUsage(**{k: int(usage.get(k) or 0) for k in LLMUsage.__dataclass_fields__}),
                )
            else:
                workflow.logger.warning("ignored a malformed llm_reply (%d argument(s))", len(args))
                return
            if len(self._replies) < MAX_REPLIES:
                self._replies.setdefault(reply.custom_id, reply)
        except Exception as err:  # noqa: BLE001 - a bad message must never fail the workflow task
            workflow.logger.warning("ignored a malformed llm_reply: %s", type(err).__name__)

    @workflow.run
    async def run(self, params: LLMTaskInput) -> TaskResult:
        task_input = params.task_input
        task = task_input.task
        self.result = TaskResult(id=task.id, status=TASK_FAILED)
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
                reply = await self._ask(params, prepared, conversation, attempt)
                self._account(reply)
                if reply.type != REPLY_SUCCEEDED:
                    last = self._failed(f"attempt {attempt}: the API reported {reply.type}: {reply.error}",
                                        f"llm_{reply.type}")
                    await self._record(task_input, last)
                    continue
                tool = _tool_use(reply.message)
                if tool is None or not isinstance(tool.get("input"), dict):
                    last = self._failed(f"attempt {attempt}: the model did not call apply_edits", "llm_no_tool")
                    await self._record(task_input, last)
                    conversation += [
                        {"role": "assistant", "content": reply.message.get("content") or [{"type": "text", "text": "-"}]},
                        {"role": "user", "content": [{"type": "text", "text": "Call apply_edits with the edits."}]},
                    ]
                    continue
                edits, summary = tool["input"].get("edits"), str(tool["input"].get("summary", ""))[:1000]
            applied: TaskResult = await workflow.execute_activity(
                ACTIVITY_LLM_APPLY,
                ApplyInput(task_input=task_input, edits=edits, summary=summary, attempt=attempt,
                           cache_key=prepared.cache_key, from_cache=from_cache),
                result_type=TaskResult,
                start_to_close_timeout=timedelta(seconds=2 * task.timeout_seconds + 120),
                heartbeat_timeout=APPLY_HEARTBEAT,
                retry_policy=QUICK,
                summary=f"{task.id}: apply edits, verify, commit, land"[:100],
            )
            applied.prompt_hash = prepared.prompt_hash
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

    async def _ask(self, params: LLMTaskInput, prepared: PreparedRequest, conversation: list, attempt: int) -> LLMReply:
        task = params.task_input.task
        info = workflow.info()
        request = {**prepared.params, "messages": conversation}
        if not task.llm_batch:
            custom_id = llm_custom_id(info.first_execution_run_id, task.id, attempt)
            try:
                return await workflow.execute_activity(
                    ACTIVITY_LLM_CALL_DIRECT, DirectCallInput(custom_id=custom_id, params=request),
                    result_type=LLMReply, start_to_close_timeout=timedelta(minutes=10), retry_policy=API,
                    summary=f"{task.id}: messages.create (attempt {attempt})"[:100],
                )
            except ActivityError as err:
                return LLMReply(custom_id=custom_id, type=REPLY_FAILED, error=root_cause_message(err))
        for resubmit in range(2):  # an expired request is resubmitted once
            custom_id = llm_custom_id(info.first_execution_run_id, task.id, attempt, resubmit)
            submit = SubmitInput(
                request=LLMRequest(custom_id=custom_id, params=request, reply_to=info.workflow_id,
                                   max_batch_size=task.llm_batch_max_size,
                                   max_batch_age_seconds=task.llm_batch_max_age_seconds),
                batch_workflow_id=llm_batch_workflow_id(info.task_queue), task_queue=info.task_queue,
            )
            try:
                await workflow.execute_activity(
                    ACTIVITY_LLM_SUBMIT, submit, start_to_close_timeout=timedelta(minutes=2), retry_policy=QUICK,
                    summary=f"{task.id}: submit to the Message Batch queue"[:100],
                )
            except ActivityError as err:
                return LLMReply(custom_id=custom_id, type=REPLY_FAILED, error=root_cause_message(err))
            self._waiting_for = custom_id
            try:
                await workflow.wait_condition(lambda: custom_id in self._replies, timeout=REPLY_TIMEOUT)
            except asyncio.TimeoutError:
                return LLMReply(custom_id=custom_id, type=REPLY_FAILED, error=f"no result within {REPLY_TIMEOUT}")
            finally:
                self._waiting_for = ""
            reply = self._replies[custom_id]
            if reply.type != REPLY_EXPIRED or resubmit:
                return reply
            self._account(reply)
            workflow.logger.info("%s expired in batch %s; resubmitting once", custom_id, reply.batch_id)
        return reply

    def _account(self, reply: LLMReply) -> None:
        r = self.result
        r.llm_requests += 1
        if reply.batch_id:
            if reply.batch_id not in r.llm_batch_ids:
                r.llm_batch_ids.append(reply.batch_id)
        elif reply.type != REPLY_FAILED or reply.message:
            r.llm_direct_calls += 1
        u = reply.usage
        r.llm_input_tokens += u.input_tokens + u.cache_creation_tokens
        r.llm_output_tokens += u.output_tokens
        r.llm_cache_read_tokens += u.cache_read_tokens
        r.llm_cost_usd = round(r.llm_cost_usd + estimate_cost(self.model, u, batched=bool(reply.batch_id)), 6)

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
        r = self.result
        for name in ("llm_direct_calls", "llm_batch_ids", "llm_requests", "llm_input_tokens", "llm_output_tokens",
                     "llm_cache_read_tokens", "llm_cost_usd"):
            setattr(outcome, name, getattr(r, name))
        return outcome

