"""The `run_task` activity: worktree, prompt, executor, verification, commit, landing op."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO

from taskfleet.activities.services.lessons_index import LessonsIndex
from taskfleet.activities.services.result_cache import ResultCache, cache_key
from taskfleet.activities.services.template_cache import TemplateCache
from taskfleet.activities.processes.executor import CommandResult, run_command, tail
from taskfleet.activities.processes.executor_policy import current_policy, task_env_problem
from taskfleet.activities.processes.executor_records import (
    TASK_KEY_VARIABLE,
    TOKEN_VARIABLE,
    ExecutorRecords,
    Stragglers,
    kill_task_processes,
    task_key,
)
from taskfleet.activities.git.git_async import GitError, git
from taskfleet.activities.git.git_op_application import OpFailed
from taskfleet.activities.git.queue_entry import base_commit_of, queue_env
from taskfleet.activities.git.scratch import ScratchDirs
from taskfleet.activities.pods.shared_clone import is_lock_contention
from taskfleet.activities.model_io.task_prompt import render_task_prompt
from taskfleet.activities.git.work_commit import CommitRefused, commit_tree
from taskfleet.activities.git.worktrees import BranchCheckedOut, Worktree, WorktreePool
from taskfleet.activities.task_commits import TreeIds, commit_from_cache, commit_work, task_message
from taskfleet.activities.task_landing import submit_landing
from temporalio import activity
from temporalio.exceptions import ApplicationError

from taskfleet.core.ids import slug
from taskfleet.core.models.lessons import Lesson
from taskfleet.core.models.orchestrator import TASK_FAILED, TASK_SUCCEEDED, TaskInput, TaskResult
from taskfleet.core.models.judge import LandInput
from taskfleet.core.models.review import STAGE_VERIFYING, TaskStage
from taskfleet.core.names import ACTIVITY_LAND_TASK, ACTIVITY_RUN_TASK, SIGNAL_TASK_STAGE
from taskfleet.core.settings import TaskfleetSettings

# A prompt up to this size also reaches the executor in TASKFLEET_PROMPT; any size by file.
PROMPT_IN_ENV_BYTES = 32 * 1024


def task_file_stem(task_id: str) -> str:
    """A file name for a task's per-task files that no other task id shares.

    Readable head plus a hash of the exact id: `T2.1` and `T2.2`, `a/b` and `a-b`, `X` and `x` all
    differ (`Path.with_suffix` on `T2.1` once gave every `T2.*` task the same lock).
    """
    return f"{slug(task_id, 48)}-{hashlib.sha256(task_id.encode()).hexdigest()[:10]}"


def state_inside(state_dir: Path, repo: str) -> bool:
    """Whether the worker's state dir lies inside the clone's work tree."""
    state, root = Path(os.path.realpath(state_dir)), Path(os.path.realpath(repo))
    return state == root or root in state.parents


class TaskActivities:
    def __init__(
        self,
        settings: TaskfleetSettings,
        lessons: LessonsIndex,
        templates: TemplateCache,
        results: ResultCache,
    ) -> None:
        self.settings = settings
        self.lessons = lessons
        self.templates = templates
        self.results = results
        self.worktrees = WorktreePool(settings.worktrees_dir, settings.pod_id)
        self.scratch = ScratchDirs(settings.scratch_dir)
        self.executors = ExecutorRecords(settings.state_dir / "executors")
        self.stragglers = Stragglers()
        self.trees = TreeIds()

    def refuse_state_dir_inside(self, task_id: str, repo: str) -> None:
        """A task must not run when the worker's state dir (worktrees, logs) is inside its clone."""
        if state_inside(self.settings.state_dir, repo):
            raise ApplicationError(
                f"task {task_id}: the worker's state dir {self.settings.state_dir} is inside the clone "
                f"{repo}; task worktrees and logs would land in the repository. Start the worker "
                f"with --state-dir (or TASKFLEET_STATE_DIR) outside {repo}",
                type="BadTaskSetup", non_retryable=True,
            )

    def prune_stale(self) -> list[Path]:
        """At worker start: kill a crashed worker's executors, then remove its worktrees."""
        self.executors.reap_dead()
        return self.worktrees.prune_stale()

    async def stop(self) -> None:
        """At worker stop: drain the worktree pool (no worktree stays registered in any clone)."""
        await self.worktrees.drain()

    async def end_earlier_attempts(self, run_key: str, task_id: str) -> None:
        """A retry: whatever an earlier attempt of this task still runs on this machine (its worker
        killed or cut off from the server) is killed before this attempt starts anything."""
        killing = asyncio.ensure_future(asyncio.to_thread(kill_task_processes, task_key(run_key, task_id)))
        while not (await asyncio.wait({killing}, timeout=1.0))[0]:
            activity.heartbeat(task_id)  # a kill may wait seconds for a process to go
        killed = killing.result()
        if killed:
            activity.logger.warning("task %s: killed %d process(es) an earlier attempt left running", task_id, killed)

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
        await self.executors.reap_now_and_then()
        if info.attempt > 1:
            await self.end_earlier_attempts(params.run_key, task.id)
        if not task.worktree:
            # An empty folder, taken and given back in microseconds: no thread hop needed.
            scratch = self.scratch.take()
            try:
                prompt_file, prompt, log = await self._task_files(params, log_path)
                with log:
                    await self._execute(params, scratch, prompt_file, prompt, log, log_path, result)
            finally:
                self.scratch.give_back(scratch)
                result.seconds = time.monotonic() - started
            if result.status == TASK_FAILED and result.failure_type:
                await self._record_lesson(params, result)
            return result
        self.refuse_state_dir_inside(task.id, params.repo)
        heartbeat = lambda: activity.heartbeat(task.id)  # noqa: E731
        try:
            # A judge's revise round starts from the commit the judge reviewed.
            base_commit = params.start_commit or base_commit_of(params)
            # Only a retry can find its own commit: attempt 1 of a run's task has made none yet.
            resumed = "" if info.attempt == 1 else await self.worktrees.resumable(
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
            try:
                worktree = await self.worktrees.take(params.repo, task.branch, base_commit, heartbeat)
            except BaseException:
                files.add_done_callback(_close_log)
                raise
            result.setup_seconds = worktree.setup_seconds
            try:
                prompt_file, prompt, log = await files
                with log:
                    await self._run(params, worktree, prompt_file, prompt, log, log_path, result)
            finally:
                self.worktrees.give_back(worktree)
                result.seconds = time.monotonic() - started
        except (BranchCheckedOut, GitError) as err:
            person = needs_a_person(err)
            if person is None:
                raise
            raise person from None
        if result.status == TASK_FAILED and result.failure_type:
            await self._record_lesson(params, result)
        return result

    async def _run(self, params: TaskInput, worktree: Worktree, prompt_file: Path, prompt: str, log: BinaryIO,
                   log_path: Path, result: TaskResult) -> None:
        task = params.task
        result.prompt_hash = cache_key(prompt=prompt)[:16]
        parts = dict(activity_type=task.activity_type, run=task.run, prompt=prompt, verify=task.verify,
                     base_tree=await self.trees.tree_of(params.repo, worktree.base_commit))
        if params.review is not None:  # a revise round: the same review of the same tree, the same work
            parts["review"] = asdict(params.review)
        key = cache_key(**parts)
        cached = None if task.refresh else self.results.get(key)
        commit = "" if cached is None else await commit_from_cache(
            params.repo, cached["commit"], worktree, task.id, params.run_key)
        if commit:
            for name in ("exec_exit_code", "verify_exit_code", "exec_seconds", "verify_seconds", "output_tail"):
                setattr(result, name, cached.get(name))
            result.status, result.commit, result.cache_hit = TASK_SUCCEEDED, commit, True
            if not params.hold_landing:
                await submit_landing(params, result)
            return

        if not await self._execute(params, worktree.path, prompt_file, prompt, log, log_path, result, stage=worktree):
            return
        try:
            if worktree.tree:  # snapshotted in process after `run`: no index, no git process
                result.commit = await asyncio.to_thread(
                    commit_tree, worktree.path, task.branch, worktree.base_commit, worktree.tree,
                    task_message(task.id, task.scope, params.run_key))
            else:
                result.commit = await commit_work(worktree.path, task.id, task.scope, task.branch, worktree.base_commit,
                                                  params.run_key, heartbeat=lambda: activity.heartbeat(task.id))
        except CommitRefused as err:
            result.status, result.failure_type, result.reason = TASK_FAILED, "bad_checkout", str(err)
            return
        self.results.put(key, {
            "commit": result.commit, "exec_exit_code": result.exec_exit_code,
            "verify_exit_code": result.verify_exit_code, "exec_seconds": result.exec_seconds,
            "verify_seconds": result.verify_seconds, "output_tail": result.output_tail,
        })
        if not params.hold_landing:  # a judged task lands once its judge approves
            await submit_landing(params, result)

    async def _execute(
        self, params: TaskInput, cwd: Path, prompt_file: Path, prompt: str, log: BinaryIO, log_path: Path,
        result: TaskResult, stage: Worktree | None = None,
    ) -> bool:
        """Executor, then verification, in `cwd`; fills `result` and says whether both passed.

        With `stage` (the task's worktree), the executor's work is taken before verification runs:
        the commit holds what the executor changed, never what verification leaves behind
        (bytecode, coverage, build output). It is snapshotted in process from the paths the
        slot's watch saw `run` touch, else staged by `git add -A`.
        """
        task = params.task
        problem = task_env_problem(task.env)
        if problem:
            raise ApplicationError(f"task {task.id}: {problem}", type="BadTaskSetup", non_retryable=True)
        # The task's own variables; what else of the worker's environment it sees is the worker's
        # rule (taskfleet.core.task_env), applied by the executor to every command.
        env = {
            "TASKFLEET_TASK_ID": task.id,
            "TASKFLEET_BRANCH": task.branch,
            "TASKFLEET_BASE": params.base,
            "TASKFLEET_WORKTREE": str(cwd),
            "TASKFLEET_PROMPT": prompt,
            "TASKFLEET_PROMPT_FILE": str(prompt_file),
            **queue_env(params),
        }
        if len(prompt.encode()) > PROMPT_IN_ENV_BYTES:
            del env["TASKFLEET_PROMPT"]  # too big for an environment (execve's limit): by file only
        if params.review is not None:
            env["TASKFLEET_REVIEW_FILE"] = str(await asyncio.to_thread(_write_review, params, log_path))
        token = self.executors.new_token()
        env[TOKEN_VARIABLE] = token
        env[TASK_KEY_VARIABLE] = task_key(params.run_key, task.id)
        heartbeat = lambda: activity.heartbeat(task.id)  # noqa: E731
        record = lambda pgid: self.executors.record(token, pgid)  # noqa: E731
        try:
            executed = await run_command(
                task.run, cwd, env, log, task.timeout_seconds, heartbeat, "run", on_start=record
            )
            result.exec_exit_code, result.exec_seconds = executed.exit_code, executed.seconds
            if _step_failed(result, executed, "exec_failed", "executor", task.timeout_seconds):
                result.output_tail = tail(log)
                return False
            if stage is not None and not await self.worktrees.snapshot(stage):
                await git(cwd, "add", "-A", heartbeat=heartbeat)  # seconds on a large tree: heartbeating
            if params.report_stages:
                await report_stage(params, STAGE_VERIFYING)
            verified = await run_command(
                task.verify, cwd, env, log, task.timeout_seconds, heartbeat, "verify", on_start=record
            )
            result.verify_exit_code, result.verify_seconds = verified.exit_code, verified.seconds
            result.output_tail = tail(log)
        finally:
            # Each command's process group is killed when it ends; a process that left its group
            # (`setsid`, a daemon) would go on writing into a folder the next task gets, or into
            # this task's commit: anything still carrying the task's token is killed now. Only then
            # is the token journalled as ended (a crash before leaves it to the next worker's reaper).
            await self.end_token(token)
        if _step_failed(result, verified, "verify_failed", f"verification `{task.verify}`", task.timeout_seconds):
            return False
        result.status = TASK_SUCCEEDED
        return True

    async def end_token(self, token: str) -> None:
        """Stop what still carries a finished task's token, then journal the token as ended; when
        the sweep fails, the token stays journalled, for the reaper once this worker is gone. In a
        PID namespace the kernel has killed everything a command started when it ended: no sweep."""
        if current_policy().trees.namespaced:
            self.executors.forget(token)
            return
        try:
            await self.stragglers.stop(token)
        except Exception as err:  # noqa: BLE001 - the task's own result stands
            activity.logger.warning("could not stop what a task left running (token %s): %s", token, err)
            return
        self.executors.forget(token)

    async def _task_files(self, params: TaskInput, log_path: Path) -> tuple[Path, str, BinaryIO]:
        """Render the prompt; write it beside the log (outside the worktree: never committed) and
        open the log for appending, in one trip to a thread (creating a file can wait on the disk
        for a millisecond: not on the event loop; each trip waits for a thread and for the loop)."""
        prompt = await render_task_prompt(self.templates, self.lessons, params)
        prompt_file = log_path.parent / f"{log_path.stem}.prompt.md"
        log = await asyncio.to_thread(_write_prompt_open_log, prompt_file, prompt, log_path)
        return prompt_file, prompt, log

    @activity.defn(name=ACTIVITY_LAND_TASK)
    async def land_task(self, params: LandInput) -> str:
        """A judged task's commit, once its judge approved: the landing op (its id is returned)."""
        if params.edits_cache_key and params.edits is not None:
            self.results.put(f"llm:{params.edits_cache_key}", {"edits": params.edits, "summary": params.summary})
        result = TaskResult(id=params.task_input.task.id, status=TASK_SUCCEEDED, commit=params.commit)
        await submit_landing(params.task_input, result)
        return result.landing_op_id

    async def _record_lesson(self, params: TaskInput, result: TaskResult) -> None:
        task = params.task
        lesson = Lesson(
            task_type=task.task_type, activity_type=task.activity_type, failure_type=result.failure_type,
            failure_msg=f"{result.reason}\n{result.output_tail[-1500:]}",
            metadata={"task_id": task.id, "branch": task.branch, "run": params.run_key, "log": result.log_path},
        )
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
        # git already waited a minute for the lock (another process on a shared clone lets go
        # sooner): a lock file that stays is stale, and every retry would wait again. The lock
        # file first: a task's reason is cut at a few hundred characters.
        what = f"stale lock file {err.lock_file}" if err.lock_file else str(err)
        return ApplicationError(
            f"{what}: git waited over a minute for it; if no git process is using the clone, remove it",
            type="BadTaskSetup", non_retryable=True,
        )
    return None


async def report_stage(params: TaskInput, stage: str) -> None:
    """Tell the orchestrator a task moved on (shown by `progress`); never the task's failure."""
    try:
        await activity.client().get_workflow_handle(params.reply_to).signal(
            SIGNAL_TASK_STAGE, TaskStage(task_id=params.task.id, stage=stage))
    except Exception as err:  # noqa: BLE001 - a stage is for people watching; the task goes on
        activity.logger.warning("could not report stage %s of %s: %s", stage, params.task.id, err)


def _write_review(params: TaskInput, log_path: Path) -> Path:
    """The judge's review for a revise round, beside the log (outside the worktree: never committed)."""
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


def _step_failed(result: TaskResult, ran: CommandResult, failure_type: str, what: str, timeout: float) -> bool:
    """Record a failed executor or verification step on `result`; False when it passed."""
    if not ran.timed_out and ran.exit_code == 0:
        return False
    result.failure_type = "timeout" if ran.timed_out else failure_type
    result.reason = f"{what} timed out after {timeout:g}s" if ran.timed_out else f"{what} exited with {ran.exit_code}"
    return True
