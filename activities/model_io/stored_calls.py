"""A model call's request and reply as the payload store holds them: a workflow's `ModelRequest`
made whole for the API, a reply stored and summed up in the few fields a workflow decides on."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from temporalio.converter import value_to_type

from taskfleet.activities.model_io.payload_store import PayloadStore
from taskfleet.core.models.llm import LLMReply, ModelRequest
from taskfleet.core.models.orchestrator import TaskInput
from taskfleet.core.models.payload import PayloadRef, ref_of

EDITS_TOOL = "apply_edits"


async def request_params(store: PayloadStore, request: ModelRequest) -> dict:
    """The Messages API params: the prepared request plus later turns (replies read back)."""
    params = dict(await store.get_json(request.prepared) if request.prepared else request.params)
    messages = list(params.get("messages") or [])
    for turn in request.turns:
        reply = ref_of(turn.get("reply")) if isinstance(turn, dict) else None
        if reply is None:
            messages.append(turn)
            continue
        message = await store.get_json(reply)
        messages.append({"role": "assistant",
                         "content": message.get("content") or [{"type": "text", "text": "-"}]})
    params["messages"] = messages
    return params


async def stored_params(store: PayloadStore, request: ModelRequest) -> PayloadRef:
    """The request's params by reference: the prepared one itself when nothing was added."""
    if request.prepared is not None and not request.turns:
        return request.prepared
    return await store.put_json(await request_params(store, request))


def first_tool(message: dict) -> dict:
    for block in message.get("content") or []:
        if isinstance(block, dict) and block.get("type") == "tool_use":
            return block
    return {}


def tool_input(message: Any, name: str) -> Any:
    """The input of the reply's call of `name` (None if it made none)."""
    for block in message.get("content") or [] if isinstance(message, dict) else []:
        if (isinstance(block, dict) and block.get("type") == "tool_use"
                and block.get("name") == name):
            return block.get("input")
    return None


async def stored_edits(store: PayloadStore, answer: PayloadRef) -> tuple[Any, str]:
    """The edits and summary of a stored reply's apply_edits call, or of a stored cache entry."""
    stored = await store.get_json(answer)
    found = tool_input(stored, EDITS_TOOL) if "content" in stored else stored
    found = found if isinstance(found, dict) else {}
    return found.get("edits"), str(found.get("summary", ""))[:1000]


async def stored_reply(store: PayloadStore, reply: LLMReply) -> LLMReply:
    """`reply` with its message moved to the store and its first tool call named."""
    if not reply.message:
        return reply
    tool = first_tool(reply.message)
    reply.tool_id, reply.tool_name = str(tool.get("id", ""))[:200], str(tool.get("name", ""))[:200]
    reply.message_ref, reply.message = await store.put_json(reply.message), {}
    return reply


async def store_task(store: PayloadStore, task_input: TaskInput) -> PayloadRef:
    """A task's input, stored once so the task's later steps carry its reference only."""
    return await store.put_json(asdict(task_input))


async def stored_task(store: PayloadStore, ref: PayloadRef) -> TaskInput:
    return value_to_type(TaskInput, await store.get_json(ref))
