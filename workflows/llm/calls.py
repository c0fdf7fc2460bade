"""One workflow's Claude requests, the same way for every role (implementer, judge, planner): one
direct `messages.create`, or a request to `LLMBatchWorkflow`, whose `llm_reply` signal the owner
forwards to `receive` (a `wait_condition`: no worker slot held). A `Conversation` holds the request
by reference: its prepared part and replies stay in the payload store; `usage` counts replies."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any, Optional

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.llm_ids import llm_batch_workflow_id, llm_custom_id
    from taskfleet.core.llm_pricing import estimate_cost
    from taskfleet.core.models.llm import (
        REPLY_EXPIRED,
        REPLY_FAILED,
        DirectCallInput,
        LLMReply,
        LLMRequest,
        LLMUsage,
        ModelRequest,
        ModelUsage,
        SubmitInput,
    )
    from taskfleet.core.models.payload import PayloadRef, ref_of
    from taskfleet.core.names import ACTIVITY_LLM_CALL_DIRECT, ACTIVITY_LLM_SUBMIT

QUICK = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                    maximum_attempts=5, non_retryable_error_types=["BadTaskSetup", "TemplateError",
                                                                   "AnthropicNotConfigured"])
API = RetryPolicy(initial_interval=timedelta(seconds=2), maximum_interval=timedelta(seconds=60),
                  maximum_attempts=5, non_retryable_error_types=["AnthropicNotConfigured"])
# A batch ends within 24 h (then its requests expire); past this, taskfleet stops waiting.
REPLY_TIMEOUT = timedelta(hours=26)
MAX_REPLIES = 1000  # replies kept (a workflow expects a handful; anything beyond is noise)


@dataclass
class Route:
    """How a workflow's requests travel: a Message Batch (with the flush rules) or direct calls."""

    batch: bool = True
    max_batch_size: int = 100_000
    max_batch_age_seconds: float = 10.0


def reply_of(args: tuple) -> Optional[LLMReply]:
    """An `llm_reply` signal's reply, or None for anything malformed (never raises)."""
    try:
        raw = args[0] if len(args) == 1 else None
        if isinstance(raw, LLMReply):
            return raw
        if (isinstance(raw, dict) and isinstance(raw.get("custom_id"), str)
                and isinstance(raw.get("type"), str)):
            usage = raw.get("usage") if isinstance(raw.get("usage"), dict) else {}
            return LLMReply(
                custom_id=raw["custom_id"], type=raw["type"],
                message=raw.get("message") if isinstance(raw.get("message"), dict) else {},
                error=str(raw.get("error", ""))[:2000], batch_id=str(raw.get("batch_id", ""))[:200],
                usage=LLMUsage(**{k: int(usage.get(k) or 0)
                                  for k in LLMUsage.__dataclass_fields__}),
                message_ref=ref_of(raw.get("message_ref")),
                tool_id=str(raw.get("tool_id", ""))[:200],
                tool_name=str(raw.get("tool_name", ""))[:200],
            )
    except Exception:  # noqa: BLE001 - a bad message must never fail the workflow task
        pass
    return None


def tool_call(message: dict, name: str) -> Optional[dict]:
    """The reply's `tool_use` block for the tool `name`, if the model called it."""
    for block in message.get("content") or []:
        if (isinstance(block, dict) and block.get("type") == "tool_use"
                and block.get("name") == name):
            return block
    return None


def called(reply: LLMReply, name: str) -> Optional[str]:
    """The id of the reply's call of `name`, or None if it made none (stored or inline reply)."""
    if reply.message:
        block = tool_call(reply.message, name)
        return str(block.get("id", "")) if block is not None else None
    return reply.tool_id if reply.tool_name == name else None


class Conversation:
    """A request as the workflow grows it: the prepared part (stored, or inline from before the
    store) and the turns added since; a reply becomes a turn by reference."""

    def __init__(self, prepared: Optional[PayloadRef], params: dict) -> None:
        self.prepared, self.params, self.turns = prepared, params, []

    def request(self) -> ModelRequest:
        return ModelRequest(prepared=self.prepared, params=self.params, turns=list(self.turns))

    def add_reply(self, reply: LLMReply) -> None:
        if reply.message_ref is not None:
            self.turns.append({"role": "assistant", "reply": asdict(reply.message_ref)})
        else:
            self.turns.append(assistant_turn(reply.message))

    def add_user(self, *content: dict) -> None:
        self.turns.append({"role": "user", "content": list(content)})

    def tool_result(self, tool_id: Optional[str], text: str) -> None:
        """The answer to the reply's tool call as an error result (plain text if it made none)."""
        if tool_id is None:
            self.add_user({"type": "text", "text": text})
        else:
            self.add_user({"type": "tool_result", "tool_use_id": tool_id, "is_error": True,
                           "content": text})


class ModelCalls:
    def __init__(self) -> None:
        self.replies: dict[str, LLMReply] = {}
        self.waiting_for = ""
        self.usage = ModelUsage()

    def receive(self, args: tuple) -> None:
        """The batcher's answer; a repeat (a retried delivery) or anything malformed is dropped."""
        reply = reply_of(args)
        if reply is None:
            workflow.logger.warning("ignored a malformed llm_reply (%d argument(s))", len(args))
            return
        if len(self.replies) < MAX_REPLIES:
            self.replies.setdefault(reply.custom_id, reply)

    def submit_input(self, name: str, attempt: int, route: Route,
                     request: Optional[ModelRequest] = None, resubmit: int = 0) -> SubmitInput:
        """What `taskfleet_llm_submit` (or a prepare step that submits at once) sends on."""
        info = workflow.info()
        custom_id = llm_custom_id(info.first_execution_run_id, name, attempt, resubmit)
        return SubmitInput(
            request=LLMRequest(custom_id=custom_id, params={}, reply_to=info.workflow_id,
                               max_batch_size=route.max_batch_size,
                               max_batch_age_seconds=route.max_batch_age_seconds),
            batch_workflow_id=llm_batch_workflow_id(info.task_queue), task_queue=info.task_queue,
            model_request=request,
        )

    async def ask(self, request: ModelRequest, model: str, name: str, attempt: int, route: Route,
                  label: str, submitted: bool = False) -> LLMReply:
        """One request's reply (`failed` when none could be had). `name` and `attempt` make its
        custom id; `label` names it in the Web UI; `submitted`: its prepare step sent it already."""
        info = workflow.info()
        if not route.batch:
            custom_id = llm_custom_id(info.first_execution_run_id, name, attempt)
            try:
                return await workflow.execute_activity(
                    ACTIVITY_LLM_CALL_DIRECT, DirectCallInput(custom_id=custom_id, request=request),
                    result_type=LLMReply, start_to_close_timeout=timedelta(minutes=10),
                    retry_policy=API, summary=f"{label}: messages.create (attempt {attempt})"[:100])
            except ActivityError as err:
                return LLMReply(custom_id=custom_id, type=REPLY_FAILED,
                                error=root_cause_message(err))
        reply = LLMReply(custom_id="", type=REPLY_FAILED, error="not sent")
        for resubmit in range(2):  # an expired request is resubmitted once
            submit = self.submit_input(name, attempt, route, request, resubmit)
            custom_id = submit.request.custom_id
            try:
                if not (submitted and resubmit == 0):
                    await workflow.execute_activity(
                        ACTIVITY_LLM_SUBMIT, submit, start_to_close_timeout=timedelta(minutes=2),
                        retry_policy=QUICK,
                        summary=f"{label}: submit to the Message Batch queue"[:100],
                    )
            except ActivityError as err:
                return LLMReply(custom_id=custom_id, type=REPLY_FAILED,
                                error=root_cause_message(err))
            self.waiting_for = custom_id
            try:
                await workflow.wait_condition(lambda: custom_id in self.replies,
                                              timeout=REPLY_TIMEOUT)
            except asyncio.TimeoutError:
                return LLMReply(custom_id=custom_id, type=REPLY_FAILED,
                                error=f"no result within {REPLY_TIMEOUT}")
            finally:
                self.waiting_for = ""
            reply = self.replies[custom_id]
            if reply.type != REPLY_EXPIRED or resubmit:
                return reply
            self.account(reply, model)
            workflow.logger.info("%s expired in batch %s; resubmitting once", custom_id,
                                 reply.batch_id)
        return reply

    def account(self, reply: LLMReply, model: str) -> None:
        u, usage = self.usage, reply.usage
        u.requests += 1
        if reply.batch_id:
            if reply.batch_id not in u.batch_ids:
                u.batch_ids.append(reply.batch_id)
        elif reply.type != REPLY_FAILED or reply.message:
            u.direct_calls += 1
        u.input_tokens += usage.input_tokens + usage.cache_creation_tokens
        u.output_tokens += usage.output_tokens
        u.cache_read_tokens += usage.cache_read_tokens
        u.cost_usd = round(
            u.cost_usd + estimate_cost(model, usage, batched=bool(reply.batch_id)), 6)


def assistant_turn(message: dict) -> dict[str, Any]:
    """The reply as the conversation's assistant turn (never empty: the API refuses that)."""
    return {"role": "assistant",
            "content": message.get("content") or [{"type": "text", "text": "-"}]}
