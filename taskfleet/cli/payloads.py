"""`taskfleet show TASK --run RUN` and `taskfleet payloads prune`: a task's Claude requests and
replies read back from the payload store (histories hold only their keys), and the store kept to
size without removing what an open run still refers to."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from taskfleet.activities.model_io.payload_store import (
    PayloadStore,
    PayloadStoreError,
    payload_store,
)
from taskfleet.cli.common import client_for, examples
from taskfleet.clients.connection import StartupError
from taskfleet.core.llm_ids import judge_workflow_id, llm_custom_id, llm_task_workflow_id
from taskfleet.core.models.payload import ref_of
from taskfleet.core.names import (
    ACTIVITY_JUDGE_PREPARE,
    ACTIVITY_LLM_CALL_DIRECT,
    ACTIVITY_LLM_PREPARE,
    ACTIVITY_LLM_SUBMIT,
    ACTIVITY_PLAN_PREPARE,
    JUDGE_WORKFLOW,
    LLM_TASK_WORKFLOW,
    ORCHESTRATOR_WORKFLOW,
    PLANNER_WORKFLOW,
    SIGNAL_LLM_REPLY,
)
from taskfleet.core.settings import TaskfleetSettings

PREPARES = {ACTIVITY_LLM_PREPARE, ACTIVITY_JUDGE_PREPARE, ACTIVITY_PLAN_PREPARE}
# Open runs of these may still read what they stored; the batcher's requests belong to them.
USERS = (ORCHESTRATOR_WORKFLOW, LLM_TASK_WORKFLOW, JUDGE_WORKFLOW, PLANNER_WORKFLOW)
MAX_ROUNDS = 20


def _store(args: argparse.Namespace) -> PayloadStore:
    settings = TaskfleetSettings()
    try:
        url = args.store if args.store is not None else settings.payload_store
        return payload_store(url, settings.payloads_dir)
    except ValueError as err:
        raise StartupError(str(err)) from None


def _decode(payloads: Any) -> Any:
    """The first payload of an event as JSON (taskfleet's payloads are all plain JSON)."""
    items = list(payloads.payloads) if payloads is not None else []
    try:
        return json.loads(items[0].data) if items else None
    except ValueError:
        return None


class Calls:
    """One workflow's model calls from its history: requests and replies by custom id, in order."""

    def __init__(self, workflow_id: str) -> None:
        self.workflow_id, self.name = workflow_id, "plan"
        self.order: list[str] = []
        self.requests: dict[str, dict] = {}  # custom id -> ModelRequest as JSON
        self.replies: dict[str, dict] = {}  # custom id -> LLMReply as JSON

    def request(self, custom_id: str, request: Any) -> None:
        if isinstance(request, dict) and custom_id not in self.requests:
            self.order.append(custom_id)
            self.requests[custom_id] = request

    def read(self, history: Any) -> None:
        scheduled: dict[int, str] = {}
        first_run = ""
        for event in history.events:
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                a = event.workflow_execution_started_event_attributes
                first_run = a.first_execution_run_id
                self.name = _request_name(a.workflow_type.name, _decode(a.input)) or self.name
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                a = event.activity_task_scheduled_event_attributes
                scheduled[event.event_id] = a.activity_type.name
                self._sent(a.activity_type.name, _decode(a.input), first_run)
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                a = event.activity_task_completed_event_attributes
                self._done(scheduled.get(a.scheduled_event_id, ""), _decode(a.result), first_run)
            elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
                a = event.marker_recorded_event_attributes
                if a.marker_name == "core_local_activity":
                    data = _decode(a.details.get("data"))
                    kind_name = data.get("activity_type", "") if isinstance(data, dict) else ""
                    self._done(kind_name, _decode(a.details.get("result")), first_run)
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                a = event.workflow_execution_signaled_event_attributes
                reply = _decode(a.input)
                if a.signal_name == SIGNAL_LLM_REPLY and isinstance(reply, dict):
                    self.replies.setdefault(str(reply.get("custom_id", "")), reply)

    def _sent(self, activity: str, value: Any, first_run: str) -> None:
        if not isinstance(value, dict):
            return
        if activity == ACTIVITY_LLM_SUBMIT:
            request = value.get("request") or {}
            inline = {"params": request.get("params")} if request.get("params") else None
            self.request(str(request.get("custom_id", "")), value.get("model_request") or inline)
        elif activity == ACTIVITY_LLM_CALL_DIRECT:
            request = value.get("request") or {"params": value.get("params")}
            self.request(str(value.get("custom_id", "")), request)

    def _done(self, activity: str, value: Any, first_run: str) -> None:
        """A prepare step's request (if the step sent it itself) and a direct call's reply."""
        if activity in PREPARES and isinstance(value, dict) and value.get("submitted"):
            custom_id = llm_custom_id(first_run, self.name, 1)
            prepared = {"prepared": value.get("request"), "params": value.get("params") or {}}
            self.request(custom_id, prepared)
        elif activity == ACTIVITY_LLM_CALL_DIRECT and isinstance(value, dict):
            self.replies.setdefault(str(value.get("custom_id", "")), value)


def _request_name(workflow_type: str, start: Any) -> str:
    """The name a workflow's custom ids start from: the task id, `<task id>-judge`, or `plan`."""
    start = start if isinstance(start, dict) else {}
    task_input = start.get("task_input") if isinstance(start.get("task_input"), dict) else {}
    about = (task_input.get("task") or {}).get("id") or (start.get("about") or {}).get("id")
    task_id = str(about or "")
    if workflow_type == LLM_TASK_WORKFLOW:
        return task_id
    return f"{task_id}-judge" if workflow_type == JUDGE_WORKFLOW and task_id else ""


async def _params(store: PayloadStore, request: dict) -> dict:
    """The request as the API got it (the same expansion the sending activity makes)."""
    params = dict(await _json(store, request.get("prepared")) or request.get("params") or {})
    messages = list(params.get("messages") or [])
    for turn in request.get("turns") or []:
        reply = ref_of(turn.get("reply")) if isinstance(turn, dict) else None
        if reply is None:
            messages.append(turn)
        else:
            message = await _json(store, turn.get("reply")) or {}
            messages.append({"role": "assistant", "content": message.get("content") or []})
    params["messages"] = messages
    return params


async def _json(store: PayloadStore, raw: Any) -> Any:
    ref = ref_of(raw)
    return None if ref is None else json.loads(store.get(ref))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    out = []
    for block in content or []:
        kind = block.get("type") if isinstance(block, dict) else ""
        if kind == "text":
            out.append(block.get("text", ""))
        elif kind == "tool_use":
            tool_input = json.dumps(block.get("input"), indent=2)
            out.append(f"[tool_use {block.get('name')}]\n{tool_input}")
        elif kind == "tool_result":
            error = " (error)" if block.get("is_error") else ""
            out.append(f"[tool_result{error}]\n{_text(block.get('content'))}")
    return "\n".join(out)


def _print_call(custom_id: str, params: dict, reply: dict | None, message: dict | None) -> None:
    turns = params.get("messages") or []
    print(f"--- request {custom_id}: model {params.get('model', '?')}, {len(turns)} message(s)")
    system = params.get("system")
    if system:
        print(f"[system]\n{_text(system)}")
    for turn in turns:
        print(f"[{turn.get('role', '?')}]\n{_text(turn.get('content'))}")
    if reply is None:
        print("--- no reply yet")
        return
    where = f" in batch {reply.get('batch_id')}" if reply.get("batch_id") else ""
    error = f": {reply.get('error')}" if reply.get("error") else ""
    print(f"--- reply: {reply.get('type')}{where}{error}")
    if message:
        print(f"[assistant]\n{_text(message.get('content'))}")


async def _history(client: Client, workflow_id: str) -> Any:
    try:
        return await client.get_workflow_handle(workflow_id).fetch_history()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


async def show(args: argparse.Namespace) -> int:
    store = _store(args)
    client = await client_for(args)
    if args.workflow:
        targets = [args.workflow]
    elif args.task and args.run:
        targets = [llm_task_workflow_id(args.run, args.task)]
        targets += [judge_workflow_id(args.run, args.task, n) for n in range(1, MAX_ROUNDS)]
    else:
        print("taskfleet: give TASK and --run RUN, or --workflow ID", file=sys.stderr)
        return 2
    found, out, unreadable = 0, [], 0
    for workflow_id in targets:
        history = await _history(client, workflow_id)
        if history is None:
            continue
        found += 1
        calls = Calls(workflow_id)
        calls.read(history)
        if not args.json:
            print(f"=== {workflow_id}: {len(calls.order)} request(s)")
        for custom_id in calls.order:
            reply = calls.replies.get(custom_id)
            try:
                params = await _params(store, calls.requests[custom_id])
                message = None
                if reply:
                    message = await _json(store, reply.get("message_ref")) or reply.get("message")
            except PayloadStoreError as err:
                unreadable += 1
                print(f"taskfleet: {custom_id}: {err}", file=sys.stderr)
                continue
            if args.json:
                out.append({"workflow_id": workflow_id, "custom_id": custom_id, "request": params,
                            "reply": {**(reply or {}), "message": message}})
            else:
                _print_call(custom_id, params, reply, message)
    if not found:
        what = args.workflow or f"task {args.task} of run {args.run}"
        print(f"taskfleet: no Claude calls found for {what} (no such workflow in this namespace)",
              file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(out, indent=2))
    return 1 if unreadable else 0


async def prune(args: argparse.Namespace) -> int:
    """Remove payloads stored before the cutoff, never one an open run may still read: the cutoff
    moves back to the start of the oldest open run that uses the store."""
    if args.older_than_days < 0:
        print("taskfleet: --older-than-days must be 0 or more", file=sys.stderr)
        return 2
    store = _store(args)
    cutoff = time.time() - args.older_than_days * 86_400
    client = await client_for(args)
    types = ", ".join(f"'{t}'" for t in USERS)
    oldest = None
    query = f"ExecutionStatus = 'Running' AND WorkflowType IN ({types})"
    async for run in client.list_workflows(query):
        if oldest is None or run.start_time < oldest.start_time:
            oldest = run
    if oldest is not None and oldest.start_time.timestamp() < cutoff:
        cutoff = oldest.start_time.timestamp() - 60
        print(f"keeping payloads from {_when(cutoff)} on: {oldest.id} is still open")
    try:
        gone, gone_bytes, kept, kept_bytes = store.prune(cutoff, dry_run=args.dry_run)
    except PayloadStoreError as err:
        print(f"taskfleet: {err}", file=sys.stderr)
        return 2
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {gone} payload(s), {gone_bytes / 1e6:.1f} MB, stored before {_when(cutoff)}; "
          f"kept {kept}, {kept_bytes / 1e6:.1f} MB, in {store.url}")
    return 0


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def add_commands(sub: argparse._SubParsersAction) -> None:
    store_help = "the payload store (default: TASKFLEET_PAYLOAD_STORE, else the state dir's)"
    s = sub.add_parser("show", help="a Claude task's prompts and replies, from the payload store",
                       **examples("taskfleet show L1 --run taskfleet-run-llm-1a2b3c4d",
                                  "taskfleet show L1 --run taskfleet-run-llm-1a2b3c4d --json",
                                  "taskfleet show --workflow taskfleet-plan-5e6f7a8b"))
    s.add_argument("task", nargs="?", help="the task id on the board")
    s.add_argument("--run", help="the run's workflow id (taskfleet run prints it)")
    s.add_argument("--workflow", help="instead: any workflow that called Claude (a planner, judge)")
    s.add_argument("--store", help=store_help)
    s.add_argument("--json", action="store_true", help="print the prompts and replies as JSON")
    s.set_defaults(func=show)
    group = sub.add_parser("payloads", help="the payload store: prompts, replies, edits")
    commands = group.add_subparsers(dest="payloads_command", required=True)
    p = commands.add_parser(
        "prune", help="remove payloads older than N days (never an open run's)",
        **examples("taskfleet payloads prune --older-than-days 30 --dry-run",
                   "taskfleet payloads prune --older-than-days 30 --store s3://b/t"))
    p.add_argument(
        "--older-than-days", type=float, required=True,
        help="remove what was last stored longer ago than this (open runs' payloads stay)")
    p.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    p.add_argument("--store", help=store_help)
    p.set_defaults(func=prune)
