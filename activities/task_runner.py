"""The `run_task` activity: worktree, prompt, executor, verification, commit, landing op."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO

from temporalio import activity
from temporalio.exceptions import ApplicationError

from taskfleet.activities.git.git_async import GitError, git
from taskfleet.activities.git.git_op_application import OpFailed
from taskfleet.activities.git.queue_entry import base_commit_of, queue_env
from taskfleet.activities.git.work_commit import CommitRefused, commit_tree
from taskfleet.activities.git.worktrees import BranchCheckedOut, Worktree
from taskfleet.activities.model_io.task_prompt import render_task_prompt
from taskfleet.activities.pods.shared_clone import is_lock_contention
from taskfleet.activities.processes.executor import CommandResult, tail
from taskfleet.activities.processes.executor_policy import task_env_problem
from taskfleet.activities.processes.executor_records import TASK_KEY_VARIABLE, task_key
from taskfleet.activities.services.lessons_index import LessonsIndex
from taskfleet.activities.services.result_cache import ResultCache, cache_key
from taskfleet.activities.services.template_cache import TemplateCache
from taskfleet.activities.task_commits import TreeIds, commit_from_cache, commit_work, task_message
from taskfleet.activities.task_landing import submit_landing
from taskfleet.activities.workspace import Workspace
from taskfleet.core.agent_usage import USAGE_FILE_MAX_BYTES, parse_usage_report
from taskfleet.core.ids import slug
from taskfleet.core.models.judge import LandInput
from taskfleet.core.models.lessons import Lesson
from taskfleet.core.models.orchestrator import TASK_FAILED, TASK_SUCCEEDED, TaskInput, TaskResult
from taskfleet.core.models.review import STAGE_VERIFYING, TaskStage
from taskfleet.core.names import ACTIVITY_LAND_TASK, ACTIVITY_RUN_TASK, SIGNAL_TASK_STAGE
from taskfleet.core.settings import TaskfleetSettings

# A prompt up to this size also reaches the executor in TASKFLEET_PROMPT; any size by file.
PROMPT_IN_ENV_BYTES = 32 * 1024


def task_file_stem(task_id: str) -> str:
    """A name for a task's files that no other task id shares: a readable head plus a hash of the
    exact id (`T2.1` and `T2.2`, `a/b` and `a-b`, `X` and `x` all differ)."""
    return f"{slug(task_id, 48)}-{hashlib.sha256(task_id.encode()).hexdigest()[:10]}"


class TaskActivities:
    def __init__(self, settings: TaskfleetSettings, lessons: LessonsIndex, templates: TemplateCache,
                 results: ResultCache, workspace: Workspace) -> None:
        self.settings = settings
        self.lessons = lessons
        self.templates = templates
        self.results = results
        self.workspace = workspace
        self.trees = TreeIds()

    @activity.defn(name=ACTIVITY_RUN_TASK)
    async def run_task(self, params: TaskInput) -> TaskResult:
        task = params.task
        started = time.monotonic()
        info = activity.info()
        run_dir = self.settings.logs_dir / slug(params.run_key, 120)
        log_path = run_dir / f"{task_file_stem(task.id)}.log"
        result = TaskResult(id=task.id, status=TASK_FAILED, log_path=str(log_path))
        scheduled = info.current_attempt_scheduled_time
        if scheduled is not None:
            result.wait_seconds = max(0.0, (datetime.now(timezone.utc) - scheduled).total_seconds())
        activity.logger.info("task %s on %s (attempt %d)", task.id, task.branch, info.attempt)
        space = self.workspace
        await space.executors.reap_now_and_then()
        if info.attempt > 1:
            await space.end_earlier_attempts(params.run_key, task.id)
        if not task.worktree:
            # An empty folder, taken and given back in microseconds: no thread hop needed.
            scratch = space.scratch.take()
            try:
                prompt_file, prompt, log = await self._task_files(params, log_path)
                with log:
                    await self._execute(params, scratch, prompt_file, prompt, log, log_path, result)
            finally:
                space.scratch.give_back(scratch)
                result.seconds = time.monotonic() - started
            if result.status == TASK_FAILED and result.failure_type:
                await self._record_lesson(params, result)
            return result
        space.refuse_state_dir_inside(f"task {task.id}", params.repo)
        heartbeat = lambda: activity.heartbeat(task.id)  # noqa: E731
        try:
            # A judge's revise round starts from the commit the judge reviewed.
            base_commit = params.start_commit or base_commit_of(params)
            # Only a retry can find its own commit: attempt 1 of a run's task has made none yet.
            resumed = "" if info.attempt == 1 else await space.worktrees.resumable(
                params.repo, task.branch, base_commit, task.id, params.run_key
            )
        except OpFailed as err:
            raise ApplicationError(str(err), type="BadTaskSetup", non_retryable=True) from None
        if resumed:
            # A retry after a crash: this run already committed the task; only landing is left.
            result.status, result.commit, result.resumed = TASK_SUCCEEDED, resumed, True
            if not params.hold_landing:
                await submit_landing(params, result)
            result.seconds = time.monotonic() - started
            return result
        # The prompt and the log are written while the slot is set up: each waits on a thread.
        files = asyncio.ensure_future(self._task_files(params, log_path))
        try:
            async with space.checkout(params.repo, task.branch, base_commit, heartbeat) as worktree:
                result.setup_seconds = worktree.setup_seconds
                prompt_file, prompt, log = await files
                with log:
                    await self._run(params, worktree, prompt_file, prompt, log, log_path, result)
        except (BranchCheckedOut, GitError) as err:
            person = needs_a_person(err)
            if person is None:
                raise
            raise person from None
        finally:
            files.add_done_callback(_close_log)  # a set-up that failed leaves the log open: closed
            result.seconds = time.monotonic() - started
        if result.status == TASK_FAILED and result.failure_type:
            await self._record_lesson(params, result)
        return result

    async def _run(self, params: TaskInput, worktree: Worktree, prompt_file: Path, prompt: str,
                   log: BinaryIO, log_path: Path, result: TaskResult) -> None:
        task = params.task
        result.prompt_hash = cache_key(prompt=prompt)[:16]
        parts = dict(activity_type=task.activity_type, run=task.run, prompt=prompt,
                     verify=task.verify,
                     base_tree=await self.trees.tree_of(params.repo, worktree.base_commit))
        if params.review is not None:  # a revise round: same review, same tree, same work
            parts["review"] = asdict(params.review)
        key = cache_key(**parts)
        cached = None if task.refresh else self.results.get(key)
        commit = "" if cached is None else await commit_from_cache(
            params.repo, cached["commit"], worktree, task.id, params.run_key)
        if commit:
            for name in ("exec_exit_code", "verify_exit_code", "exec_seconds", "verify_seconds",
                         "output_tail"):
                setattr(result, name, cached.get(name))
            result.status, result.commit, result.cache_hit = TASK_SUCCEEDED, commit, True
            if not params.hold_landing:
                await submit_landing(params, result)
            return

        if not await self._execute(params, worktree.path, prompt_file, prompt, log, log_path,
                                   result, stage=worktree):
            return
        try:
            if worktree.tree:  # snapshotted in process after `run`: no index, no git process
                result.commit = await asyncio.to_thread(
                    commit_tree, worktree.path, task.branch, worktree.base_commit, worktree.tree,
                    task_message(task.id, task.scope, params.run_key))
            else:
                result.commit = await commit_work(worktree.path, task.id, task.scope, task.branch,
                                                  worktree.base_commit, params.run_key,
                                                  heartbeat=lambda: activity.heartbeat(task.id))
        except CommitRefused as err:
            result.status, result.failure_type, result.reason = (
                TASK_FAILED, "bad_checkout", str(err))
            return
        self.results.put(key, {
            "commit": result.commit, "exec_exit_code": result.exec_exit_code,
            "verify_exit_code": result.verify_exit_code, "exec_seconds": result.exec_seconds,
            "verify_seconds": result.verify_seconds, "output_tail": result.output_tail,
        })
        if not params.hold_landing:  # a judged task lands once its judge approves
            await submit_landing(params, result)

    async def _execute(self, params: TaskInput, cwd: Path, prompt_file: Path, prompt: str,
                       log: BinaryIO, log_path: Path, result: TaskResult,
                       stage: Worktree | None = None) -> bool:
        """Executor, then verification, in `cwd`; fills `result`, True if both passed. With `stage`,
        the commit holds what the executor changed, never what verification leaves behind."""
        task = params.task
        problem = task_env_problem(task.env)
        if problem:
            raise ApplicationError(f"task {task.id}: {problem}", type="BadTaskSetup",
                                   non_retryable=True)
        # The task's own variables; the executor adds the worker's rule (taskfleet.core.task_env).
        env = {"TASKFLEET_TASK_ID": task.id, "TASKFLEET_BRANCH": task.branch,
               "TASKFLEET_BASE": params.base, "TASKFLEET_WORKTREE": str(cwd),
               "TASKFLEET_PROMPT": prompt, "TASKFLEET_PROMPT_FILE": str(prompt_file),
               "TASKFLEET_USAGE_FILE": str(
                   usage_file := log_path.parent / f"{log_path.stem}.usage.json"),
               **queue_env(params)}
        usage_file.unlink(missing_ok=True)  # a round's report is its own, never an earlier round's
        if len(prompt.encode()) > PROMPT_IN_ENV_BYTES:
            del env["TASKFLEET_PROMPT"]  # too big for an environment (execve's limit): by file only
        if params.review is not None:
            env["TASKFLEET_REVIEW_FILE"] = str(
                await asyncio.to_thread(_write_review, params, log_path))
        env[TASK_KEY_VARIABLE] = task_key(params.run_key, task.id)
        heartbeat = lambda: activity.heartbeat(task.id)  # noqa: E731
        # One token for `run` and `verify`: a process that left its group (`setsid`, a daemon) still
        # carries it and is stopped after both, before it writes into a reused folder or the commit.
        async with self.workspace.commands(heartbeat) as run:
            executed = await run(task.run, cwd, env, log, task.timeout_seconds, "run")
            result.exec_exit_code, result.exec_seconds = executed.exit_code, executed.seconds
            if usage_file.exists():  # a stat; read on a thread only when the agent wrote one
                await asyncio.to_thread(_read_usage, usage_file, result)
            if _step_failed(result, executed, "exec_failed", "executor", task.timeout_seconds):
                result.output_tail = tail(log)
                return False
            if stage is not None and not await self.workspace.worktrees.snapshot(stage):
                await git(cwd, "add", "-A", heartbeat=heartbeat)  # seconds on a large tree
            if params.report_stages:
                await report_stage(params, STAGE_VERIFYING)
            verified = await run(task.verify, cwd, env, log, task.timeout_seconds, "verify")
            result.verify_exit_code, result.verify_seconds = verified.exit_code, verified.seconds
            result.output_tail = tail(log)
        if _step_failed(result, verified, "verify_failed", f"verification `{task.verify}`",
                        task.timeout_seconds):
            return False
        result.status = TASK_SUCCEEDED
        return True

    async def _task_files(self, params: TaskInput, log_path: Path) -> tuple[Path, str, BinaryIO]:
        """Render the prompt, write it beside the log (outside the worktree: never committed) and
        open the log, in one trip to a thread: creating a file waits on the disk, not the loop."""
        prompt = await render_task_prompt(self.templates, self.lessons, params)
        prompt_file = log_path.parent / f"{log_path.stem}.prompt.md"
        log = await asyncio.to_thread(_write_prompt_open_log, prompt_file, prompt, log_path)
        return prompt_file, prompt, log

    @activity.defn(name=ACTIVITY_LAND_TASK)
    async def land_task(self, params: LandInput) -> str:
        """A judged task's commit, once its judge approved: the landing op (its id is returned)."""
        if params.edits_cache_key and params.edits is not None:
            self.results.put(f"llm:{params.edits_cache_key}",
                             {"edits": params.edits, "summary": params.summary})
        result = TaskResult(id=params.task_input.task.id, status=TASK_SUCCEEDED,
                            commit=params.commit)
        await submit_landing(params.task_input, result)
        return result.landing_op_id

    async def _record_lesson(self, params: TaskInput, result: TaskResult) -> None:
        task = params.task
        lesson = Lesson(task_type=task.task_type, activity_type=task.activity_type,
                        failure_type=result.failure_type,
                        failure_msg=f"{result.reason}\n{result.output_tail[-1500:]}",
                        metadata={"task_id": task.id, "branch": task.branch, "run": params.run_key,
                                  "log": result.log_path})
        try:
            await asyncio.to_thread(self.lessons.record, lesson)
        except OSError as err:
            activity.logger.warning("could not record a lesson for %s: %s", task.id, err)


def needs_a_person(err: Exception) -> ApplicationError | None:
    """The task's non-retryable `BadTaskSetup` for a set-up failure only a person can clear (a
    branch they have checked out, a lock file that stays), or None: a retry may still succeed."""
    if isinstance(err, BranchCheckedOut):
        return ApplicationError(str(err), type="BadTaskSetup", non_retryable=True)
    if isinstance(err, GitError) and is_lock_contention(err.stderr):
        # git already waited a minute: a lock file that stays is stale, and every retry would wait
        # again. The lock file first: a task's reason is cut at a few hundred characters.
        what = f"stale lock file {err.lock_file}" if err.lock_file else str(err)
        return ApplicationError(f"{what}: git waited over a minute for it; if no git process is "
                                "using the clone, remove it", type="BadTaskSetup",
                                non_retryable=True)
    return None


async def report_stage(params: TaskInput, stage: str) -> None:
    """Tell the orchestrator a task moved on (shown by `progress`); never the task's failure."""
    try:
        await activity.client().get_workflow_handle(params.reply_to).signal(
            SIGNAL_TASK_STAGE, TaskStage(task_id=params.task.id, stage=stage))
    except Exception as err:  # noqa: BLE001 - a stage is for people watching; the task goes on
        activity.logger.warning("could not report stage %s of %s: %s", stage, params.task.id, err)


def _read_usage(path: Path, result: TaskResult) -> None:
    """What the task's agent reported it cost (TASKFLEET_USAGE_FILE), on the task's result."""
    try:
        with open(path, "rb") as report:
            usage = parse_usage_report(report.read(USAGE_FILE_MAX_BYTES).decode(errors="replace"))
    except OSError as err:
        activity.logger.warning("could not read %s: %s", path, err)
        return
    if usage is not None:
        result.agent_reports = 1
        result.agent_cost_usd, result.agent_input_tokens = usage.cost_usd, usage.input_tokens
        result.agent_output_tokens = usage.output_tokens


def _write_review(params: TaskInput, log_path: Path) -> Path:
    """The judge's review for a revise round, beside the log (outside the worktree)."""
    path = log_path.parent / f"{log_path.stem}.review.json"
    review = {**asdict(params.review), "commit": params.start_commit, "attempt": params.attempt - 1}
    path.write_text(json.dumps(review, indent=2) + "\n")
    return path


def _write_prompt_open_log(prompt_file: Path, prompt: str, log_path: Path) -> BinaryIO:
    prompt_file.parent.mkdir(parents=True, exist_ok=True)
    prompt_file.write_text(prompt)
    return open(log_path, "a+b")


def _close_log(files: asyncio.Future) -> None:
    """A task's files written for nothing (its set-up failed): close the log, keep no error."""
    if not files.cancelled() and files.exception() is None:
        files.result()[2].close()


def _step_failed(result: TaskResult, ran: CommandResult, failure_type: str, what: str,
                 timeout: float) -> bool:
    """Record a failed executor or verification step on `result`; False when it passed."""
    if not ran.timed_out and ran.exit_code == 0:
        return False
    result.failure_type = "timeout" if ran.timed_out else failure_type
    result.reason = (f"{what} timed out after {timeout:g}s" if ran.timed_out
                     else f"{what} exited with {ran.exit_code}")
    return True
