"""The task side of the Claude implementer's activities: a task's request prepared (prompt, context
files, cache key) and stored; the model's edits from its stored reply applied in a worktree,
verified, committed and landed; a failed attempt kept as a lesson. None waits for the model (the
workflows do); sending the request is `llm_api.py`'s."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from git import Repo
from temporalio import activity
from temporalio.exceptions import ApplicationError

from taskfleet.activities.git.git_op_application import OpFailed, commit_env
from taskfleet.activities.git.queue_entry import base_commit_of
from taskfleet.activities.git.work_commit import commit_tree
from taskfleet.activities.git.worktrees import RUN_TRAILER, TASK_TRAILER, BranchCheckedOut, Worktree
from taskfleet.activities.llm_api import submit_request
from taskfleet.activities.model_io.llm_edits import EditRefused, apply_edits
from taskfleet.activities.model_io.repo_files import RepoReadError, base_commit, context_files
from taskfleet.activities.model_io.stored_calls import (
    EDITS_TOOL,
    store_task,
    stored_edits,
    stored_task,
)
from taskfleet.activities.model_io.task_prompt import render_task_prompt
from taskfleet.activities.model_role import ModelRole
from taskfleet.activities.processes.executor import tail
from taskfleet.activities.processes.executor_policy import task_env_problem
from taskfleet.activities.processes.executor_records import TASK_KEY_VARIABLE, task_key
from taskfleet.activities.services.result_cache import cache_key
from taskfleet.activities.task_landing import submit_landing
from taskfleet.activities.task_runner import needs_a_person, report_stage, task_file_stem
from taskfleet.core.ids import slug
from taskfleet.core.models.lessons import Lesson
from taskfleet.core.models.llm import ApplyInput, FailureInput, PreparedRequest, SubmitInput
from taskfleet.core.models.orchestrator import TASK_FAILED, TASK_SUCCEEDED, TaskInput, TaskResult
from taskfleet.core.models.payload import compact
from taskfleet.core.models.review import STAGE_VERIFYING
from taskfleet.core.names import (
    ACTIVITY_LLM_APPLY,
    ACTIVITY_LLM_PREPARE,
    ACTIVITY_LLM_RECORD_FAILURE,
)

TOOL_NAME = EDITS_TOOL
APPLY_EDITS_TOOL = {
    "name": TOOL_NAME,
    "description": (
        "Apply text edits to files of the repository. Each edit replaces old_text, which must "
        "occur exactly once in the file, with new_text; an empty old_text creates a new file. "
        "Paths are relative to the repository root."
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
    "You are an implementer working for taskfleet. You change files only through the apply_edits "
    "tool: taskfleet applies your edits in a fresh worktree of the repository, runs the task's "
    "verify command, and commits and lands the branch when it exits 0. Each edit replaces "
    "old_text, which must occur exactly once in its file (copy it exactly, with enough surrounding "
    "lines to be unique), with new_text; an empty old_text creates a new file. Paths are relative "
    "to the repository root; never edit under .git. If a verify run fails, you get its output and "
    "may send corrected edits, which apply to the original base again (not on top of your earlier "
    "edits). Make the smallest change that does the task.")


class LLMActivities(ModelRole):
    def activities(self) -> list[Any]:
        return [self.prepare, self.apply, self.record_failure]

    # --- prepare ---------------------------------------------------------------------------------

    @activity.defn(name=ACTIVITY_LLM_PREPARE)
    async def prepare(self, params: TaskInput, submit: SubmitInput | None = None) -> Any:
        """The stored request (template and lessons as a cached system prefix, one forced tool), its
        cache key, any cached edits and the stored task; with `submit`, sent unless cached."""
        task = params.task
        base_commit, tree, files = await asyncio.to_thread(self._read_base, params)
        system = await render_task_prompt(self.templates, self.lessons, params)
        user = [f"Task id: {task.id}", f"Scope: {task.scope}",
                f"Branch: {task.branch} (from {params.base})"]
        if task.acceptance:
            user.append(f"Acceptance: {task.acceptance}")
        user.append(f"Verify command (must exit 0): {task.verify}")
        landing = params.queue
        if landing is not None and landing.feedback:
            user.append(
                f"\nThe merge queue sent your earlier change back (attempt {landing.attempt}); "
                f"make it again on the current {landing.target} (the files below are from it), so "
                f"that it merges and passes with what landed meanwhile:\n{landing.feedback}")
        if files:
            user.append(f"\nFiles from the base commit {base_commit[:12]}:")
            user.extend(f'\n<file path="{path}">\n{text}\n</file>' for path, text in files)
        user.append(f"\nCall {TOOL_NAME} with every edit the task needs.")
        request = {
            "model": task.model or self.llm.default_model,
            "max_tokens": task.max_tokens,
            # Two cache breakpoints: the shared rules (across a batch), the task's (across fixes).
            "system": [{"type": "text", "text": SHARED_RULES,
                        "cache_control": {"type": "ephemeral"}},
                       {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "\n".join(user)}]}],
            "tools": [APPLY_EDITS_TOOL],
            "tool_choice": {"type": "tool", "name": TOOL_NAME},
        }
        key = cache_key(kind="llm-edits", params=request, base_tree=tree)
        stored = await self.store.put_json(request)
        prepared = PreparedRequest(request=stored, model=request["model"], cache_key=key,
                                   base_commit=base_commit,
                                   prompt_hash=cache_key(prompt=system)[:16])
        cached = None if task.refresh else self.results.get(f"llm:{key}")
        if cached is not None and isinstance(cached.get("edits"), list):
            prepared.cached = await self.store.put_json(
                {"edits": cached["edits"], "summary": str(cached.get("summary", ""))})
        prepared.task = await store_task(self.store, params)
        if submit is not None and prepared.cached is None:
            submit.request.params_ref = prepared.request
            await submit_request(self.llm, submit)
            prepared.submitted = True
        return compact(prepared)

    def _read_base(self, params: TaskInput) -> tuple[str, str, list[tuple[str, str]]]:
        """Base commit, its tree, and the `context` files read from it (bounded in total size)."""
        task = params.task
        repo = Repo(params.repo)
        try:
            # A re-run after the merge queue sent it back starts from the tip it was judged on.
            queued = params.queue.start_commit if params.queue is not None else ""
            commit = queued or base_commit(repo, params.base, params.remote)
            tree = repo.git.rev_parse(f"{commit}^{{tree}}")
            return (commit, tree, context_files(repo, commit, task.context,
                                                self.llm.context_max_bytes, params.base))
        except RepoReadError as err:
            raise ApplicationError(f"task {task.id}: {err}", type="BadTaskSetup",
                                   non_retryable=True) from None
        finally:
            repo.close()

    # --- apply, verify, commit, land -------------------------------------------------------------

    @activity.defn(name=ACTIVITY_LLM_APPLY)
    async def apply(self, params: ApplyInput) -> TaskResult:
        """The model's edits in a fresh worktree, then verify, commit and land as command tasks do
        (the result compact: the workflow's `TaskResult` fills in its defaults)."""
        return compact(await self._apply(params))

    async def _apply(self, params: ApplyInput) -> TaskResult:
        task_input = params.task_input
        if task_input is None:  # stored: read once here
            assert params.task is not None
            stored = await stored_task(self.store, params.task)
            task_input = replace(stored, hold_landing=params.hold_landing,
                                 report_stages=params.report_stages)
        task = task_input.task
        started = time.monotonic()
        log_path = (self.settings.logs_dir / slug(task_input.run_key, 120)
                    / f"{task_file_stem(task.id)}.log")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        result = TaskResult(id=task.id, status=TASK_FAILED, log_path=str(log_path))
        heartbeat = lambda: activity.heartbeat(task.id)  # noqa: E731
        space = self.workspace
        space.refuse_state_dir_inside(f"task {task.id}", task_input.repo)
        problem = task_env_problem(task.env)
        if problem:
            raise ApplicationError(f"task {task.id}: {problem}", type="BadTaskSetup",
                                   non_retryable=True)
        if activity.info().attempt > 1:
            await space.end_earlier_attempts(task_input.run_key, task.id)
        if params.answer is not None:
            params.edits, params.summary = await stored_edits(self.store, params.answer)
        if task_input.report_stages:
            await report_stage(task_input, STAGE_VERIFYING)
        try:
            base_commit = base_commit_of(task_input)
            resumed = await space.worktrees.resumable(
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
            async with space.checkout(task_input.repo, task.branch, base_commit,
                                      heartbeat) as worktree:
                result.setup_seconds = worktree.setup_seconds
                await self._verify_and_commit(params, task_input, worktree, log_path, result)
        except BranchCheckedOut as err:
            raise needs_a_person(err) from None
        finally:
            result.seconds = time.monotonic() - started
            if result.status == TASK_FAILED and result.failure_type:
                await self._record(task_input, result.failure_type,
                                   f"{result.reason}\n{result.output_tail[-1500:]}",
                                   result.log_path)
        return result

    async def _verify_and_commit(self, params: ApplyInput, task_input: TaskInput,
                                 worktree: Worktree, log_path: Path, result: TaskResult) -> None:
        """The model's edits applied, verified and committed (landed unless a judge holds them)."""
        task, space = task_input.task, self.workspace
        with open(log_path, "a+b") as log:
            source = "cached edits" if params.from_cache else f"attempt {params.attempt}"
            log.write(f"\n[taskfleet] {source}: {params.summary}\n".encode())
            try:
                touched = await asyncio.to_thread(apply_edits, worktree.path, params.edits)
            except EditRefused as err:
                result.failure_type, result.reason = "edits_refused", f"edits refused: {err}"
                log.write(f"[taskfleet] {result.reason}\n".encode())
                result.output_tail = tail(log)
                return
            log.write(f"[taskfleet] applied edits to {', '.join(touched)}\n".encode())
            # The commit holds the model's edits, never what verification leaves behind.
            if not await space.worktrees.snapshot(worktree, known=touched):
                await asyncio.to_thread(_stage, worktree.path, touched)
            # The executor adds only what the worker's rules give a task: never the API key.
            env = {"TASKFLEET_TASK_ID": task.id, "TASKFLEET_BRANCH": task.branch,
                   "TASKFLEET_BASE": task_input.base, "TASKFLEET_WORKTREE": str(worktree.path),
                   TASK_KEY_VARIABLE: task_key(task_input.run_key, task.id)}
            async with space.commands(lambda: activity.heartbeat(task.id)) as run:
                verified = await run(task.verify, worktree.path, env, log,
                                     task.timeout_seconds, "verify")
            result.verify_exit_code, result.verify_seconds = verified.exit_code, verified.seconds
            result.output_tail = tail(log)
        if verified.timed_out or verified.exit_code != 0:
            result.failure_type = "timeout" if verified.timed_out else "verify_failed"
            result.reason = (
                f"verification `{task.verify}` timed out after {task.timeout_seconds:g}s"
                if verified.timed_out
                else f"verification `{task.verify}` exited with {verified.exit_code}")
            return
        if worktree.tree:
            result.commit = await asyncio.to_thread(
                commit_tree, worktree.path, task.branch, worktree.base_commit, worktree.tree,
                _message(task.id, task.scope, task_input.run_key, params.summary))
        else:
            result.commit = await asyncio.to_thread(_commit, worktree.path, task.id, task.scope,
                                                    task_input.run_key, params.summary)
        result.status, result.cache_hit = TASK_SUCCEEDED, params.from_cache
        if task_input.hold_landing:
            return  # its judge decides; the edits are kept (and the commit lands) once approved
        if params.cache_key and not params.from_cache:
            self.results.put(f"llm:{params.cache_key}",
                             {"edits": params.edits, "summary": params.summary})
        await submit_landing(task_input, result)

    @activity.defn(name=ACTIVITY_LLM_RECORD_FAILURE)
    async def record_failure(self, params: FailureInput) -> None:
        """A failed attempt that never reached a worktree (API refusal, expiry, no tool call)."""
        await self._record(params.task_input, params.failure_type, params.reason, "")

    async def _record(self, task_input: TaskInput, failure_type: str, message: str,
                      log: str) -> None:
        task = task_input.task
        lesson = Lesson(task_type=task.task_type, activity_type=task.activity_type,
                        failure_type=failure_type, failure_msg=message, metadata={
                            "task_id": task.id, "branch": task.branch, "run": task_input.run_key,
                            "log": log, "implementer": "anthropic"})
        try:
            await asyncio.to_thread(self.lessons.record, lesson)
        except (OSError, ValueError) as err:
            activity.logger.warning("could not record a lesson for %s: %s", task.id, err)


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
    body = ((summary.strip() + "\n\n" if summary.strip() else "")
            + f"{TASK_TRAILER}: {task_id}\n{RUN_TRAILER}: {run_key}")
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
        # Hooks off, as for a command task: a hook is the clone's code, run in the worker's env.
        repo.git(c="core.hooksPath=/dev/null").commit("--no-verify", "--allow-empty",
                                                      "-m", title[:200], "-m", body[:4000],
                                                      env=commit_env(repo))
        return repo.head.commit.hexsha
    finally:
        repo.close()
