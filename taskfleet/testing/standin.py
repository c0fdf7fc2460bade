"""`StandIn`: the Messages and Message Batches wire format on 127.0.0.1, for the real `anthropic`
client (`ANTHROPIC_BASE_URL`). It answers each request with a call of the tool it forces
(`apply_edits`, `submit_review`, `submit_board`), from a script (by task id, else in request order)
or a default behaviour, and counts every API call it serves."""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

TASK_ID = re.compile(r"Task id: (\S+)")
GOAL = re.compile(r"Goal: (.+)")
MAX_TASKS = re.compile(r"at most (\d+) tasks")
EDITS, REVIEW, BOARD = "apply_edits", "submit_review", "submit_board"
FAKE_API_KEY = "standin-not-a-real-key"
# A behaviour: `edits` + `summary`, `verdict` + `reasons` + `comments`, or `board`; or `input` (the
# tool's exact input), `no_tool: true`, or `result` ("errored", "expired", "canceled") + `error`.
Behavior = dict[str, Any]


def default_behavior(task_id: str, params: dict) -> Behavior:
    """Create `llm/<task id>.txt` holding the task id: enough for a `test -f` verification."""
    return {"edits": [{"path": f"llm/{task_id}.txt", "old_text": "", "new_text": f"{task_id}\n"}],
            "summary": f"wrote llm/{task_id}.txt"}


def default_review(task_id: str, params: dict) -> Behavior:
    """Approve: the stand-in reads no diff."""
    return {"verdict": "approve",
            "reasons": [f"the stand-in approves {task_id or 'the change'} (it reads no diff)"],
            "comments": []}


def default_plan(params: dict) -> Behavior:
    """Up to two tasks that work on any repository, each writing the `plan/<id>.md` it verifies."""
    text = _user_text(params)
    goal = (GOAL.search(text).group(1).strip() if GOAL.search(text) else "the goal")[:200]
    limit = int(MAX_TASKS.search(text).group(1)) if MAX_TASKS.search(text) else 2
    tasks = [{"id": f"P{i}", "scope": f"step {i} of the plan for: {goal}",
              "run": f'mkdir -p plan && printf "%s\\n" "$TASKFLEET_TASK_ID: {_shell_safe(goal)}" '
                     '> "plan/$TASKFLEET_TASK_ID.md"',
              "verify": 'test -s "plan/$TASKFLEET_TASK_ID.md"'}
             for i in range(1, min(2, limit) + 1)]
    return {"board": {"name": "offline-plan", "tasks": tasks}}


def _shell_safe(text: str) -> str:
    """Text that stays literal inside double quotes in `sh` (the stand-in's own commands only)."""
    return re.sub(r'[^A-Za-z0-9 .,:;_/+=-]', "", text)[:120]


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


@dataclass
class _Batch:
    id: str
    created_at: datetime
    lines: list[dict]
    polls_left: int
    canceled: bool = False
    ended_at: datetime | None = None


@dataclass
class StandIn:
    script: dict[str, list[Behavior]] = field(default_factory=dict)  # apply_edits, by task id
    default: Callable[[str, dict], Behavior] = default_behavior
    reviews: dict[str, list[Behavior]] = field(default_factory=dict)  # submit_review, by task id
    default_review: Callable[[str, dict], Behavior] = default_review
    plans: list[Behavior] = field(default_factory=list)  # submit_board answers, in request order
    default_plan: Callable[[dict], Behavior] = default_plan
    batch_polls: int = 0  # retrieves that still say `in_progress` before a batch ends
    out_of_order: bool = True  # results come back reversed (the API promises no order)
    create_delays: list[float] = field(default_factory=list)  # seconds each create's answer waits
    extra_result_ids: list[str] = field(default_factory=list)  # result lines for unsubmitted ids

    def __post_init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.requests: list[dict] = []  # each request served: {task, tool, custom_id, via, params}
        self._batches: dict[str, _Batch] = {}
        self._order: list[str] = []
        self._systems: set[str] = set()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    # --- life -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def env(self) -> dict[str, str]:
        """What a worker needs in its environment to talk to this stand-in."""
        return {"ANTHROPIC_BASE_URL": self.url, "ANTHROPIC_API_KEY": FAKE_API_KEY}

    def start(self) -> StandIn:
        standin = self

        class Handler(_Handler):
            owner = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="anthropic-standin",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @contextmanager
    def serving(self) -> Iterator[StandIn]:
        """Started, with this process's environment (which in-process workers read) pointing at it;
        the environment put back and the server stopped after."""
        self.start()
        saved = {k: os.environ.get(k) for k in self.env()}
        os.environ.update(self.env())
        try:
            yield self
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            self.stop()

    def __enter__(self) -> StandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- counts ------------------------------------------------------------------------------

    @property
    def api_calls(self) -> int:
        """Calls that cost money on the real API: batch creates and direct messages."""
        return self.calls["batches.create"] + self.calls["messages.create"]

    def batch_contents(self) -> list[list[str]]:
        """Each batch's custom ids, in the order the batches were made."""
        with self._lock:
            return [[line["custom_id"] for line in self._batches[i].lines] for i in self._order]

    def batch_sizes(self) -> list[int]:
        with self._lock:
            return [len(self._batches[i].lines) - len(self.extra_result_ids) for i in self._order]

    # --- behaviour ---------------------------------------------------------------------------

    def requests_for(self, tool: str) -> list[dict]:
        """The requests that forced `tool` (apply_edits, submit_review, submit_board)."""
        with self._lock:
            return [r for r in self.requests if r["tool"] == tool]

    def _behavior(self, tool: str, task_id: str, params: dict) -> Behavior:
        if tool == REVIEW:
            queue = self.reviews.get(task_id)
            return queue.pop(0) if queue else self.default_review(task_id, params)
        if tool == BOARD:
            return self.plans.pop(0) if self.plans else self.default_plan(params)
        queue = self.script.get(task_id)
        return queue.pop(0) if queue else self.default(task_id, params)

    def _answer(self, params: dict, custom_id: str | None, via: str) -> tuple[Behavior, dict]:
        task_id, tool = _task_of(params), _tool_of(params)
        with self._lock:
            behavior = self._behavior(tool, task_id, params)
            self.requests.append({"task": task_id, "tool": tool, "custom_id": custom_id, "via": via,
                                  "params": params})
            system = params.get("system") or []
            blocks = [{"type": "text", "text": system}] if isinstance(system, str) else list(system)
            # Prompt caching: the longest prefix ending at a cache_control block seen before.
            prefixes = [json.dumps(blocks[: i + 1], sort_keys=True) for i, b in enumerate(blocks)
                        if isinstance(b, dict) and b.get("cache_control")]
            read = max((len(p) for p in prefixes if p in self._systems), default=0)
            self._systems.update(prefixes)
        total = len(json.dumps(blocks, sort_keys=True))
        return behavior, self._message(params, tool, behavior, read // 4, (total - read) // 4)

    def _message(self, params: dict, tool: str, behavior: Behavior, read_tokens: int,
                 written_tokens: int) -> dict:
        if "input" in behavior:
            tool_input = behavior["input"]
        elif tool == REVIEW:
            tool_input = {"verdict": behavior.get("verdict", "approve"),
                          "reasons": behavior.get("reasons", []),
                          "comments": behavior.get("comments", [])}
        elif tool == BOARD:
            tool_input = behavior.get("board", {})
        else:
            tool_input = {"edits": behavior.get("edits", []),
                          "summary": behavior.get("summary", "")}
        content: list[dict] = [{"type": "text", "text": "Here is my answer."}]
        if not behavior.get("no_tool"):
            content.append({"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}",
                            "name": tool, "input": tool_input})
        total = len(json.dumps(params)) // 4
        return {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
                "model": params.get("model", ""), "content": content,
                "stop_reason": "end_turn" if behavior.get("no_tool") else "tool_use",
                "stop_sequence": None,
                "usage": {"input_tokens": max(total - read_tokens - written_tokens, 1),
                          "output_tokens": len(json.dumps(tool_input)) // 4 + 10,
                          "cache_read_input_tokens": read_tokens,
                          "cache_creation_input_tokens": written_tokens}}

    def _result_line(self, request: dict) -> dict:
        behavior, message = self._answer(request.get("params", {}),
                                         request.get("custom_id"), "batch")
        kind = behavior.get("result", "succeeded")
        if kind == "succeeded":
            result: dict = {"type": "succeeded", "message": message}
        elif kind == "errored":
            result = {"type": "errored", "error": {"type": "error", "error": {
                "type": "invalid_request_error",
                "message": behavior.get("error", "scripted error")}}}
        else:
            result = {"type": kind}
        return {"custom_id": request.get("custom_id"), "result": result}

    # --- batches -----------------------------------------------------------------------------

    def _batch_json(self, batch: _Batch) -> dict:
        ended = batch.ended_at is not None
        counts = Counter(line["result"]["type"] for line in batch.lines) if ended else Counter()
        if batch.canceled and ended:
            counts = Counter({"canceled": len(batch.lines)})
        return {"id": batch.id, "type": "message_batch",
                "processing_status": ("ended" if ended
                                      else ("canceling" if batch.canceled else "in_progress")),
                "request_counts": {"processing": 0 if ended else len(batch.lines),
                                   "succeeded": counts["succeeded"], "errored": counts["errored"],
                                   "canceled": counts["canceled"], "expired": counts["expired"]},
                "created_at": _iso(batch.created_at), "ended_at": _iso(batch.ended_at),
                "expires_at": _iso(batch.created_at + timedelta(hours=24)),
                "cancel_initiated_at": _iso(batch.ended_at) if batch.canceled else None,
                "archived_at": None,
                "results_url": (f"{self.url}/v1/messages/batches/{batch.id}/results" if ended
                                else None)}

    def create_batch(self, body: dict) -> dict:
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            raise _ApiError(400, "invalid_request_error",
                            "requests: at least one request is required")
        ids = [r.get("custom_id") for r in requests if isinstance(r, dict)]
        if len(ids) != len(requests) or len(set(ids)) != len(ids):
            raise _ApiError(400, "invalid_request_error",
                            "requests: custom_id must be unique within a batch")
        lines = [self._result_line(r) for r in requests]
        if self.out_of_order:
            lines.reverse()
        for extra in self.extra_result_ids:
            lines.append({"custom_id": extra, "result": {"type": "canceled"}})
        batch = _Batch(id=f"msgbatch_{uuid.uuid4().hex[:24]}", created_at=_now(), lines=lines,
                       polls_left=self.batch_polls)
        with self._lock:
            self._batches[batch.id] = batch
            self._order.append(batch.id)
            if batch.polls_left <= 0:
                batch.ended_at = _now()
        return self._batch_json(batch)

    def retrieve(self, batch_id: str) -> dict:
        with self._lock:
            batch = self._batch(batch_id)
            if batch.ended_at is None:
                batch.polls_left -= 1
                if batch.polls_left < 0:
                    batch.ended_at = _now()
        return self._batch_json(batch)

    def cancel(self, batch_id: str) -> dict:
        with self._lock:
            batch = self._batch(batch_id)
            if batch.ended_at is None:
                batch.canceled = True
                batch.ended_at = _now()
                batch.lines = [{"custom_id": line["custom_id"], "result": {"type": "canceled"}}
                               for line in batch.lines]
        return self._batch_json(batch)

    def results(self, batch_id: str) -> bytes:
        with self._lock:
            batch = self._batch(batch_id)
            if batch.ended_at is None:
                raise _ApiError(400, "invalid_request_error", "batch has not ended")
            return b"".join(json.dumps(line).encode() + b"\n" for line in batch.lines)

    def list(self, limit: int) -> dict:
        with self._lock:
            data = [self._batch_json(self._batches[i]) for i in reversed(self._order)][:limit]
        return {"data": data, "has_more": False, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None}

    def _batch(self, batch_id: str) -> _Batch:
        batch = self._batches.get(batch_id)
        if batch is None:
            raise _ApiError(404, "not_found_error", f"no batch {batch_id}")
        return batch


class _ApiError(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def _tool_of(params: dict) -> str:
    choice = params.get("tool_choice")
    name = choice.get("name") if isinstance(choice, dict) else None
    return name if name in (EDITS, REVIEW, BOARD) else EDITS


def _user_text(params: dict) -> str:
    texts = []
    for message in params.get("messages", [])[:1]:
        content = message.get("content")
        texts += ([content] if isinstance(content, str)
                  else [b.get("text", "") for b in content or [] if isinstance(b, dict)])
    return "\n".join(t or "" for t in texts)


def _task_of(params: dict) -> str:
    for message in params.get("messages", [])[:1]:
        content = message.get("content")
        blocks = ([content] if isinstance(content, str)
                  else [b.get("text", "") for b in content or [] if isinstance(b, dict)])
        for text in blocks:
            found = TASK_ID.search(text or "")
            if found:
                return found.group(1)
    return ""


class _Handler(BaseHTTPRequestHandler):
    owner: StandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("request-id", f"req_{uuid.uuid4().hex[:16]}")
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (a killed worker): the work is recorded anyway

    def _json(self, status: int, value: Any) -> None:
        self._send(status, json.dumps(value).encode())

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            value = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            raise _ApiError(400, "invalid_request_error", "body is not JSON") from None
        if not isinstance(value, dict):
            raise _ApiError(400, "invalid_request_error", "body must be an object")
        return value

    def _route(self, method: str) -> None:
        owner = self.owner
        url = urlparse(self.path)
        parts = [p for p in url.path.split("/") if p]
        try:
            if not (self.headers.get("x-api-key")
                    or self.headers.get("authorization", "").startswith("Bearer ")):
                raise _ApiError(401, "authentication_error",
                                "an API key is required (x-api-key or Bearer)")
            if method == "POST" and parts == ["v1", "messages"]:
                owner.calls["messages.create"] += 1
                body = self._body()
                behavior, message = owner._answer(body, None, "direct")
                if behavior.get("result", "succeeded") != "succeeded":
                    raise _ApiError(400, "invalid_request_error",
                                    behavior.get("error", "scripted error"))
                return self._json(200, message)
            if parts[:3] == ["v1", "messages", "batches"]:
                rest = parts[3:]
                if method == "POST" and not rest:
                    owner.calls["batches.create"] += 1
                    batch = owner.create_batch(self._body())
                    delay = owner.create_delays.pop(0) if owner.create_delays else 0.0
                    if delay:
                        time.sleep(delay)
                    return self._json(200, batch)
                if method == "GET" and not rest:
                    owner.calls["batches.list"] += 1
                    limit = int(parse_qs(url.query).get("limit", ["20"])[0])
                    return self._json(200, owner.list(limit))
                if method == "GET" and len(rest) == 1:
                    owner.calls["batches.retrieve"] += 1
                    return self._json(200, owner.retrieve(rest[0]))
                if method == "GET" and len(rest) == 2 and rest[1] == "results":
                    owner.calls["batches.results"] += 1
                    return self._send(200, owner.results(rest[0]), "application/binary")
                if method == "POST" and len(rest) == 2 and rest[1] == "cancel":
                    owner.calls["batches.cancel"] += 1
                    return self._json(200, owner.cancel(rest[0]))
            raise _ApiError(404, "not_found_error",
                            f"{method} {url.path} is not part of the stand-in")
        except _ApiError as err:
            self._json(err.status,
                       {"type": "error", "error": {"type": err.kind, "message": err.message}})

    def do_GET(self) -> None:  # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

