"""Activities of the Claude implementer: prepare a request, call the API (direct or as a Message
Batch), apply the model's edits, verify, commit and land.

Each is short: no activity waits for a batch (the workflows do, on timers and signals). The API key
and endpoint come from the worker's environment (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`, read by
the SDK); nothing secret enters a payload, a log line or an error message.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anthropic
from git import Repo
from taskfleet.activities.services.lessons_index import LessonsIndex
from taskfleet.activities.services.result_cache import ResultCache, cache_key
from taskfleet.activities.services.template_cache import TemplateCache
from taskfleet.activities.git.work_commit import commit_tree
from taskfleet.activities.processes.executor import run_command, tail
from taskfleet.activities.processes.executor_records import TASK_KEY_VARIABLE, TOKEN_VARIABLE, task_key
from taskfleet.activities.git.git_op_application import OpFailed, commit_env
from taskfleet.activities.model_io.llm_edits import EditRefused, apply_edits
from taskfleet.activities.git.queue_entry import base_commit_of
from taskfleet.activities.model_io.repo_files import RepoReadError, base_commit, context_files
from taskfleet.activities.model_io.task_prompt import render_task_prompt
from taskfleet.activities.git.worktrees import RUN_TRAILER, TASK_TRAILER, BranchCheckedOut
from taskfleet.activities.processes.executor_policy import task_env_problem
from taskfleet.activities.task_landing import submit_landing
from taskfleet.activities.task_runner import needs_a_person, task_file_stem
from temporalio import activity
from temporalio.exceptions import ApplicationError

from taskfleet.core.ids import slug
from taskfleet.core.llm_settings import LLMSettings
from taskfleet.core.models.lessons import Lesson
from taskfleet.core.models.llm import (
    REPLY_ERRORED,
    REPLY_FAILED,
    REPLY_SUCCEEDED,
    ApplyInput,
    CreateBatchInput,
    CreateBatchOutput,
    DeliverResultsInput,
    DeliverResultsOutput,
    DirectCallInput,
    FailureInput,
    LLMReply,
    LLMUsage,
    PollBatchOutput,
    PreparedRequest,
    SubmitInput,
)
from taskfleet.core.models.orchestrator import TASK_FAILED, TASK_SUCCEEDED, TaskInput, TaskResult
from taskfleet.core.names import (
    ACTIVITY_LLM_APPLY,
    ACTIVITY_LLM_CALL_DIRECT,
    ACTIVITY_LLM_CREATE_BATCH,
    ACTIVITY_LLM_DELIVER_RESULTS,
    ACTIVITY_LLM_POLL_BATCH,
    ACTIVITY_LLM_PREPARE,
    ACTIVITY_LLM_RECORD_FAILURE,
    ACTIVITY_LLM_SUBMIT,
    LLM_BATCH_WORKFLOW,
    SIGNAL_LLM_REPLY,
    SIGNAL_LLM_SUBMIT,
)

TOOL_NAME = "apply_edits"
APPLY_EDITS_TOOL = {
    "name": TOOL_NAME,
    "description": (
        "Apply text edits to files of the repository. Each edit replaces old_text, which must occur "
        "exactly once in the file, with new_text; an empty old_text creates a new file. Paths are "
        "relative to the repository root."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "edits": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string"},
                        "old_text": {"type": "string"},
                        "new_text": {"type": "string"},
                    },
                    "required": ["path", "old_text", "new_text"],
                },
            },
            "summary": {"type": "string", "description": "one line: what the edits do"},
        },
        "required": ["edits", "summary"],
    },
}
SHARED_RULES = (
    "You are an implementer working for taskfleet. You change files only through the apply_edits tool: "
    "taskfleet applies your edits in a fresh worktree of the repository, runs the task's verify command, "
    "and commits and lands the branch when it exits 0. Each edit replaces old_text, which must occur "
    "exactly once in its file (copy it exactly, with enough surrounding lines to be unique), with "
    "new_text; an empty old_text creates a new file. Paths are relative to the repository root; never "
    "edit under .git. If a verify run fails, you get its output and may send corrected edits, which "
    "apply to the original base again (not on top of your earlier edits). Make the smallest change "
    "that does the task."
)
# A batch this much older than its flush cannot be the flush's (clocks of worker and API may differ).
CLOCK_SKEW = timedelta(minutes=10)
RETRYABLE_STATUS = {408, 409, 429}


def _api_error_message(err: anthropic.APIStatusError) -> str:
    body = err.body if isinstance(err.body, dict) else {}
    inner = body.get("error") if isinstance(body.get("error"), dict) else {}
    message = inner.get("message") or str(err)
    return f"{err.status_code} {inner.get('type', 'error')}: {message}"[:500]


def _raise_api(err: Exception, what: str) -> None:
    """An API failure as an ApplicationError: retryable unless the API refused the request itself."""
    if isinstance(err, anthropic.APIStatusError):
        retryable = err.status_code in RETRYABLE_STATUS or err.status_code >= 500
        raise ApplicationError(f"{what}: {_api_error_message(err)}", type="AnthropicAPIError",
                               non_retryable=not retryable) from None
    raise ApplicationError(f"{what}: {type(err).__name__}: {err}"[:500], type="AnthropicConnectionError") from None


def usage_of(message: dict) -> LLMUsage:
    usage = message.get("usage") or {}
    return LLMUsage(
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        cache_read_tokens=int(usage.get("cache_read_input_tokens") or 0),
        cache_creation_tokens=int(usage.get("cache_creation_input_tokens") or 0),
    )


class LLMActivities:
    def __init__(self, settings: Any, llm: LLMSettings, lessons: LessonsIndex, templates: TemplateCache,
                 results: ResultCache, tasks: Any) -> None:
        self.settings = settings
        self.llm = llm
        self.lessons = lessons
        self.templates = templates
        self.results = results
        self.tasks = tasks  # TaskActivities: its worktree pool, and how task processes start and end
        self._client: anthropic.AsyncAnthropic | None = None
        self._client_env: tuple[str, str] | None = None

    def activities(self) -> list[Any]:
        return [self.prepare, self.submit, self.call_direct, self.create_batch, self.poll_batch,
                self.deliver_results, self.apply, self.record_failure]

    def client(self) -> anthropic.AsyncAnthropic:
        """One SDK client per worker, rebuilt if the environment changed (the SDK reads it)."""
        env = (os.environ.get("ANTHROPIC_BASE_URL", ""), os.environ.get("ANTHROPIC_API_KEY", ""))
        if self._client is None or env != self._client_env:
            if not env[1]:
                raise ApplicationError("ANTHROPIC_API_KEY is not set in the worker's environment",
                                       type="AnthropicNotConfigured", non_retryable=True)
            self._client = anthropic.AsyncAnthropic(max_retries=self.llm.sdk_max_retries)
            self._client_env = env
        return self._client

    # --- prepare ---------------------------------------------------------------------------------

    @activity.defn(name=ACTIVITY_LLM_PREPARE)
    async def prepare(self, params: TaskInput) -> PreparedRequest:
        """The request (template + lessons as a cached system prefix, task + context files as the user
        turn, one forced tool), its cache key, and the cached edits if the key was seen before."""
        task = params.task
        base_commit, tree, files = await asyncio.to_thread(self._read_base, params)
        system = await render_task_prompt(self.templates, self.lessons, params)
        user = [f"Task id: {task.id}", f"Scope: {task.scope}", f"Branch: {task.branch} (from {params.base})"]
        if task.acceptance:
            user.append(f"Acceptance: {task.acceptance}")
        user.append(f"Verify command (must exit 0): {task.verify}")
        landing = params.queue
        if landing is not None and landing.feedback:
            user.append(f"\nThe merge queue sent your earlier change back (attempt {landing.attempt}); make it again on "
                        f"the current {landing.target} (the files below are from it), so that it merges and passes "
                        f"with what landed meanwhile:\n{landing.feedback}")
        if files:
            user.append(f"\nFiles from the base commit {base_commit[:12]}:")
            user.extend(f'\n<file path="{path}">\n{text}\n</file>' for path, text in files)
        user.append(f"\nCall {TOOL_NAME} with every edit the task needs.")
        request = {
            "model": task.model or self.llm.default_model,
            "max_tokens": task.max_tokens,
            # Two cache breakpoints: the prefix every task shares (tool + taskfleet's rules) is read
            # from the prompt cache across a batch; the task's own prompt, across its fix rounds.
            "system": [{"type": "text", "text": SHARED_RULES, "cache_control": {"type": "ephemeral"}},
                       {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "\n".join(user)}]}],
            "tools": [APPLY_EDITS_TOOL],
            "tool_choice": {"type": "tool", "name": TOOL_NAME},
        }
        key = cache_key(kind="llm-edits", params=request, base_tree=tree)
        prepared = PreparedRequest(params=request, cache_key=key, base_commit=base_commit,
                                   prompt_hash=cache_key(prompt=system)[:16])
        cached = None if task.refresh else self.results.get(f"llm:{key}")
        if cached is not None and isinstance(cached.get("edits"), list):
            prepared.cached_edits, prepared.cached_summary = cached["edits"], str(cached.get("summary", ""))
        return prepared

    def _read_base(self, params: TaskInput) -> tuple[str, str, list[tuple[str, str]]]:
        """Base commit, its tree, and the `context` files read from it (bounded in total size)."""
        task = params.task
        repo = Repo(params.repo)
        try:
            # A re-run after the merge queue sent the change back starts from the tip it was judged on.
            queued = params.queue.start_commit if params.queue is not None else ""
            commit = queued or base_commit(repo, params.base, params.remote)
            tree = repo.git.rev_parse(f"{commit}^{{tree}}")
            return commit, tree, context_files(repo, commit, task.context, self.llm.context_max_bytes, params.base)
        except RepoReadError as err:
            raise ApplicationError(f"task {task.id}: {err}", type="BadTaskSetup", non_retryable=True) from None
        finally:
            repo.close()

    # --- the API -----------------------------------------------------------------------------------

    @activity.defn(name=ACTIVITY_LLM_SUBMIT)
    async def submit(self, params: SubmitInput) -> None:
        """Signal-with-start the queue's LLMBatchWorkflow with one request (its config from this worker)."""
        await activity.client().start_workflow(
            LLM_BATCH_WORKFLOW, self.llm.batch_config(), id=params.batch_workflow_id, task_queue=params.task_queue,
            start_signal=SIGNAL_LLM_SUBMIT, start_signal_args=[params.request],
            static_summary="Claude requests of this task queue, sent as Message Batches",
        )

    @activity.defn(name=ACTIVITY_LLM_CALL_DIRECT)
    async def call_direct(self, params: DirectCallInput) -> LLMReply:
        """One `messages.create` (llm_batch = false). A request the API refuses is an `errored` reply."""
        try:
            message = await self.client().messages.create(**params.params)
        except anthropic.APIStatusError as err:
            if err.status_code in RETRYABLE_STATUS or err.status_code >= 500:
                _raise_api(err, "messages.create")
            return LLMReply(custom_id=params.custom_id, type=REPLY_ERRORED, error=_api_error_message(err))
        except anthropic.APIError as err:
            _raise_api(err, "messages.create")
        data = message.to_dict()
        return LLMReply(custom_id=params.custom_id, type=REPLY_SUCCEEDED, message=data, usage=usage_of(data))

    @activity.defn(name=ACTIVITY_LLM_CREATE_BATCH)
    async def create_batch(self, params: CreateBatchInput) -> CreateBatchOutput:
        """ONE `messages.batches.create` per flush. `create` has no idempotency key, so a retry first
        looks for the batch an earlier attempt made (a crash may have lost its answer)."""
        client = self.client()
        if activity.info().attempt > 1:
            found = await self._find_earlier_batch(client, params)
            if found:
                activity.logger.warning("%s: found batch %s made by an earlier attempt", params.flush_id, found)
                return CreateBatchOutput(batch_id=found, recovered=True)
        try:
            # No SDK retry here: a timed-out create may have succeeded; the next attempt looks first.
            once = client.with_options(max_retries=0, timeout=max(self.llm.api_timeout_seconds - 5, 5))
            batch = await once.messages.batches.create(requests=params.requests)
        except anthropic.APIError as err:
            _raise_api(err, "messages.batches.create")
        return CreateBatchOutput(batch_id=batch.id)

    async def _find_earlier_batch(self, client: anthropic.AsyncAnthropic, params: CreateBatchInput) -> str:
        """The marker: a batch created since the flush was cut, with exactly its number of requests,
        that this batcher has not recorded. Results are matched by custom_id afterwards, so a wrong
        pick shows up as missing results (failed attempts), never as another task's edits."""
        try:
            page = await client.messages.batches.list(limit=100)
        except anthropic.APIError as err:
            _raise_api(err, "messages.batches.list")
        since = datetime.fromisoformat(params.cut_at) - CLOCK_SKEW
        known = set(params.known_batch_ids)
        candidates = []
        for batch in page.data:
            counts = batch.request_counts
            total = counts.processing + counts.succeeded + counts.errored + counts.canceled + counts.expired
            created = batch.created_at if batch.created_at.tzinfo else batch.created_at.replace(tzinfo=since.tzinfo)
            if batch.id not in known and total == len(params.requests) and created >= since:
                candidates.append((created, batch.id))
        return min(candidates)[1] if candidates else ""

    @activity.defn(name=ACTIVITY_LLM_POLL_BATCH)
    async def poll_batch(self, batch_id: str) -> PollBatchOutput:
        try:
            batch = await self.client().messages.batches.retrieve(batch_id)
        except anthropic.APIError as err:
            _raise_api(err, f"messages.batches.retrieve {batch_id}")
        return PollBatchOutput(batch_id=batch.id, processing_status=batch.processing_status,
                               request_counts=batch.request_counts.to_dict())

    @activity.defn(name=ACTIVITY_LLM_DELIVER_RESULTS)
    async def deliver_results(self, params: DeliverResultsInput) -> DeliverResultsOutput:
        """Read the batch's results (unordered) and signal each request's workflow by custom_id.

        Results go straight to the waiting task, so bulk output never enters the batcher's history.
        A retry re-sends; each task keeps the first reply per custom_id."""
        routes = dict(zip(params.custom_ids, params.reply_to))
        out = DeliverResultsOutput()
        seen: set[str] = set()
        temporal = activity.client()
        try:
            lines = await self.client().messages.batches.results(params.batch_id)
            async for line in lines:
                data = line.to_dict()
                custom_id = str(data.get("custom_id", ""))
                if custom_id not in routes:
                    activity.logger.warning("batch %s: result for unknown custom_id %r dropped", params.batch_id,
                                            custom_id[:80])
                    out.unknown.append(custom_id[:80])
                    continue
                await self._reply(temporal, routes[custom_id], _reply_of(data, params.batch_id))
                seen.add(custom_id)
                out.delivered += 1
                activity.heartbeat(out.delivered)
        except anthropic.APIError as err:
            _raise_api(err, f"messages.batches.results {params.batch_id}")
        for custom_id in params.custom_ids:
            if custom_id not in seen:
                out.missing.append(custom_id)
                await self._reply(temporal, routes[custom_id], LLMReply(
                    custom_id=custom_id, type=REPLY_FAILED, batch_id=params.batch_id,
                    error=f"batch {params.batch_id} has no result for this request"))
        return out

    async def _reply(self, temporal: Any, workflow_id: str, reply: LLMReply) -> None:
        try:
            await temporal.get_workflow_handle(workflow_id).signal(SIGNAL_LLM_REPLY, reply)
        except Exception as err:  # noqa: BLE001 - a finished or vanished task is not the batch's failure
            activity.logger.warning("could not deliver %s to %s: %s", reply.custom_id, workflow_id, err)

    # --- apply, verify, commit, land -------------------------------------------------------------

    @activity.defn(name=ACTIVITY_LLM_APPLY)
    async def apply(self, params: ApplyInput) -> TaskResult:
        """The model's edits in a fresh worktree, then verify, commit and land as command tasks do."""
        task_input = params.task_input
        task = task_input.task
        started = time.monotonic()
        log_path = self.settings.logs_dir / slug(task_input.run_key, 120) / f"{task_file_stem(task.id)}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        result = TaskResult(id=task.id, status=TASK_FAILED, log_path=str(log_path))
        heartbeat = lambda: activity.heartbeat(task.id)  # noqa: E731
        self.tasks.refuse_state_dir_inside(task.id, task_input.repo)
        problem = task_env_problem(task.env)
        if problem:
            raise ApplicationError(f"task {task.id}: {problem}", type="BadTaskSetup", non_retryable=True)
        if activity.info().attempt > 1:
            await self.tasks.end_earlier_attempts(task_input.run_key, task.id)
        try:
            base_commit = base_commit_of(task_input)
            resumed = await self.tasks.worktrees.resumable(
                task_input.repo, task.branch, base_commit, task.id, task_input.run_key
            )
        except OpFailed as err:
            raise ApplicationError(str(err), type="BadTaskSetup", non_retryable=True) from None
        if resumed == params.reviewed_commit:
            resumed = ""  # the judge asked for another attempt: that commit is the last one's
        if resumed:
            # A retry after a crash: this run already committed the task; only landing is left.
            result.status, result.commit, result.resumed = TASK_SUCCEEDED, resumed, True
            if not task_input.hold_landing:
                await submit_landing(task_input, result)
            return result
        try:
            worktree = await self.tasks.worktrees.take(task_input.repo, task.branch, base_commit, heartbeat)
        except BranchCheckedOut as err:
            raise needs_a_person(err) from None
        result.setup_seconds = worktree.setup_seconds
        try:
            with open(log_path, "a+b") as log:
                source = "cached edits" if params.from_cache else f"attempt {params.attempt}"
                log.write(f"\n[taskfleet] {source}: {params.summary}\n".encode())
                try:
                    touched = await asyncio.to_thread(apply_edits, worktree.path, params.edits)
                except EditRefused as err:
                    result.failure_type, result.reason = "edits_refused", f"edits refused: {err}"
                    log.write(f"[taskfleet] {result.reason}\n".encode())
                    result.output_tail = tail(log)
                    return result
                log.write(f"[taskfleet] applied edits to {', '.join(touched)}\n".encode())
                # The commit holds the model's edits, never what verification leaves behind.
                # Snapshotted in process from the paths the edits touched (no index, no git
                # process), else staged by git.
                if not await self.tasks.worktrees.snapshot(worktree, known=touched):
                    await asyncio.to_thread(_stage, worktree.path, touched)
                token = self.tasks.executors.new_token()  # as a command task's: reaped if the worker dies
                # The task's own variables: the executor adds only what the worker's rules give a
                # task (never the API key, nor any other credential the operator did not allow).
                env = {"TASKFLEET_TASK_ID": task.id, "TASKFLEET_BRANCH": task.branch,
                       "TASKFLEET_BASE": task_input.base, "TASKFLEET_WORKTREE": str(worktree.path),
                       TOKEN_VARIABLE: token, TASK_KEY_VARIABLE: task_key(task_input.run_key, task.id)}
                try:
                    verified = await run_command(task.verify, worktree.path, env, log, task.timeout_seconds,
                                                 lambda: activity.heartbeat(task.id), "verify",
                                                 on_start=lambda pgid: self.tasks.executors.record(token, pgid))
                finally:  # nothing of it outlives the step; then it is journalled as ended
                    await self.tasks.end_token(token)
                result.verify_exit_code, result.verify_seconds = verified.exit_code, verified.seconds
                result.output_tail = tail(log)
            if verified.timed_out or verified.exit_code != 0:
                result.failure_type = "timeout" if verified.timed_out else "verify_failed"
                result.reason = (f"verification `{task.verify}` timed out after {task.timeout_seconds:g}s"
                                 if verified.timed_out else f"verification `{task.verify}` exited with {verified.exit_code}")
                return result
            if worktree.tree:
                result.commit = await asyncio.to_thread(
                    commit_tree, worktree.path, task.branch, worktree.base_commit, worktree.tree,
                    _message(task.id, task.scope, task_input.run_key, params.summary))
            else:
                result.commit = await asyncio.to_thread(_commit, worktree.path, task.id, task.scope,
                                                        task_input.run_key, params.summary)
            result.status, result.cache_hit = TASK_SUCCEEDED, params.from_cache
            if task_input.hold_landing:
                return result  # its judge decides; the edits are kept (and the commit lands) once approved
            if params.cache_key and not params.from_cache:
                self.results.put(f"llm:{params.cache_key}", {"edits": params.edits, "summary": params.summary})
            await submit_landing(task_input, result)
            return result
        finally:
            self.tasks.worktrees.give_back(worktree)
            result.seconds = time.monotonic() - started
            if result.status == TASK_FAILED and result.failure_type:
                await self._record(task_input, result.failure_type, f"{result.reason}\n{result.output_tail[-1500:]}",
                                   result.log_path)

    @activity.defn(name=ACTIVITY_LLM_RECORD_FAILURE)
    async def record_failure(self, params: FailureInput) -> None:
        """A failed attempt that never reached the worktree (the API refused, expired, no tool call)."""
        await self._record(params.task_input, params.failure_type, params.reason, "")

    async def _record(self, task_input: TaskInput, failure_type: str, message: str, log: str) -> None:
        task = task_input.task
        lesson = Lesson(
            task_type=task.task_type, activity_type=task.activity_type, failure_type=failure_type,
            failure_msg=message, metadata={"task_id": task.id, "branch": task.branch, "run": task_input.run_key,
                                           "log": log, "implementer": "anthropic"},
        )
        try:
            await asyncio.to_thread(self.lessons.record, lesson)
        except (OSError, ValueError) as err:
            activity.logger.warning("could not record a lesson for %s: %s", task.id, err)


def _reply_of(line: dict, batch_id: str) -> LLMReply:
    custom_id = str(line.get("custom_id", ""))
    result = line.get("result") if isinstance(line.get("result"), dict) else {}
    kind = str(result.get("type", REPLY_FAILED))
    if kind == REPLY_SUCCEEDED:
        message = result.get("message") if isinstance(result.get("message"), dict) else {}
        return LLMReply(custom_id=custom_id, type=kind, message=message, batch_id=batch_id, usage=usage_of(message))
    error = ""
    if kind == REPLY_ERRORED:
        outer = result.get("error") if isinstance(result.get("error"), dict) else {}
        inner = outer.get("error") if isinstance(outer.get("error"), dict) else outer
        error = f"{inner.get('type', 'error')}: {inner.get('message', '')}"[:500]
    return LLMReply(custom_id=custom_id, type=kind, error=error or f"the batch reported {kind}", batch_id=batch_id)


def _stage(worktree: Path, touched: list[str]) -> None:
    """Stage exactly the paths the edits touched (a deleted one is staged as deleted)."""
    paths = list(dict.fromkeys(touched))
    present = [p for p in paths if os.path.lexists(worktree / p)]
    gone = [p for p in paths if p not in present]
    repo = Repo(worktree)
    try:
        if present:
            repo.git.add("-A", "--", *present)
        if gone:  # deleted, or made and deleted again by a later edit
            repo.git.rm("--cached", "-q", "-r", "--ignore-unmatch", "--", *gone)
    finally:
        repo.close()


def _title_body(task_id: str, scope: str, run_key: str, summary: str) -> tuple[str, str]:
    title = f"{task_id}: {scope}" if scope else task_id
    body = (summary.strip() + "\n\n" if summary.strip() else "") + f"{TASK_TRAILER}: {task_id}\n{RUN_TRAILER}: {run_key}"
    return title, body


def _message(task_id: str, scope: str, run_key: str, summary: str) -> str:
    """The commit message `_commit` has git write (title, summary, trailers)."""
    title, body = _title_body(task_id, scope, run_key, summary)
    return f"{title[:200].strip()}\n\n{body[:4000].strip()}\n"


def _commit(worktree: Path, task_id: str, scope: str, run_key: str, summary: str) -> str:
    """Commit what `_stage` staged: the model's edits."""
    repo = Repo(worktree)
    try:
        title, body = _title_body(task_id, scope, run_key, summary)
        # Hooks off, as for a command task's commit: a hook is code in the clone, and it would run
        # in the worker's own environment.
        repo.git(c="core.hooksPath=/dev/null").commit("--no-verify", "--allow-empty", "-m", title[:200],
                                                      "-m", body[:4000], env=commit_env(repo))
        return repo.head.commit.hexsha
    finally:
        repo.close()
