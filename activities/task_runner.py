"""The `run_task` activity: worktree, prompt, executor, verification, commit, landing op."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import asdict
from pathlib import Path

from git import Repo
from git.exc import GitCommandError
from taskfleet.activities.services.lessons_index import LessonsIndex
from taskfleet.activities.services.result_cache import ResultCache, cache_key
from taskfleet.activities.services.template_cache import (
    TEMPLATE_SUFFIXES,
    TemplateCache,
    TemplateRenderError,
)
from taskfleet.activities.support.executor import CommandResult, run_command, tail
from taskfleet.activities.support.git_op_application import OpFailed, commit_env
from taskfleet.activities.support.scratch import ScratchDirs
from taskfleet.activities.support.worktrees import (
    RUN_TRAILER,
    TASK_TRAILER,
    Worktree,
    WorktreeManager,
)
from temporalio import activity
from temporalio.exceptions import ApplicationError

from taskfleet.core.git_batch_start import op_payload, with_start_options
from taskfleet.core.ids import landing_op_id, slug
from taskfleet.core.models.git_batch import GitBatchConfig, GitOp
from taskfleet.core.models.lessons import Lesson, LessonQuery
from taskfleet.core.models.orchestrator import (
    TASK_FAILED,
    TASK_SUCCEEDED,
    TaskInput,
    TaskResult,
)
from taskfleet.core.names import ACTIVITY_RUN_TASK, GIT_BATCH_WORKFLOW, SIGNAL_ENQUEUE
from taskfleet.core.settings import TaskfleetSettings

PROMPT_LESSONS = 10


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
        self.worktrees = WorktreeManager(settings.worktrees_dir)
        self.scratch = ScratchDirs(settings.scratch_dir)

    @activity.defn(name=ACTIVITY_RUN_TASK)
    async def run_task(self, params: TaskInput) -> TaskResult:
        task = params.task
        started = time.monotonic()
        log_path = self.settings.logs_dir / slug(params.run_key, 120) / f"{slug(task.id, 64)}.log"
        result = TaskResult(id=task.id, status=TASK_FAILED, log_path=str(log_path))
        activity.logger.info("task %s on %s (attempt %d)", task.id, task.branch, activity.info().attempt)
        if not task.worktree:
            # An empty folder, taken and given back in microseconds: no thread hop needed.
            scratch = self.scratch.take()
            try:
                await self._execute(params, scratch, *await self._write_prompt(params, log_path), log_path, result)
            finally:
                self.scratch.give_back(scratch)
                result.seconds = time.monotonic() - started
            if result.status == TASK_FAILED and result.failure_type:
                await self._record_lesson(params, result)
            return result
        try:
            worktree = await asyncio.to_thread(
                self.worktrees.create, params.repo, params.remote, task.id, task.branch, params.base, params.run_key
            )
        except OpFailed as err:
            raise ApplicationError(str(err), type="BadTaskSetup", non_retryable=True) from None
        try:
            await self._run(params, worktree, log_path, result)
        finally:
            await asyncio.shield(asyncio.to_thread(self.worktrees.remove, params.repo, worktree))
            result.seconds = time.monotonic() - started
        if result.status == TASK_FAILED and result.failure_type:
            await self._record_lesson(params, result)
        return result

    async def _run(self, params: TaskInput, worktree: Worktree, log_path: Path, result: TaskResult) -> None:
        task = params.task
        if worktree.resumed_commit:
            # A retry after a crash: this run already committed the task; only landing is left.
            result.status, result.commit, result.resumed = TASK_SUCCEEDED, worktree.resumed_commit, True
            await self._land(params, result)
            return
        prompt_file, prompt = await self._write_prompt(params, log_path)
        result.prompt_hash = cache_key(prompt=prompt)[:16]
        key = cache_key(
            activity_type=task.activity_type, run=task.run, prompt=prompt, verify=task.verify,
            base_tree=await asyncio.to_thread(_tree_of, params.repo, worktree.base_commit),
        )
        cached = None if task.refresh else self.results.get(key)
        if cached is not None:
            try:
                await asyncio.to_thread(_check_out, worktree.path, cached["commit"])
            except GitCommandError:  # the commit is not in this clone: run the task after all
                cached = None
        if cached is not None:
            for name in ("exec_exit_code", "verify_exit_code", "exec_seconds", "verify_seconds", "output_tail"):
                setattr(result, name, cached.get(name))
            result.status, result.commit, result.cache_hit = TASK_SUCCEEDED, cached["commit"], True
            await self._land(params, result)
            return

        if not await self._execute(params, worktree.path, prompt_file, prompt, log_path, result):
            return
        result.commit = await asyncio.to_thread(_commit, worktree.path, task.id, task.scope, params.run_key)
        self.results.put(key, {
            "commit": result.commit, "exec_exit_code": result.exec_exit_code,
            "verify_exit_code": result.verify_exit_code, "exec_seconds": result.exec_seconds,
            "verify_seconds": result.verify_seconds, "output_tail": result.output_tail,
        })
        await self._land(params, result)

    async def _execute(
        self, params: TaskInput, cwd: Path, prompt_file: Path, prompt: str, log_path: Path, result: TaskResult
    ) -> bool:
        """Executor, then verification, in `cwd`; fills `result` and says whether both passed."""
        task = params.task
        env = {
            **os.environ,
            "TASKFLEET_TASK_ID": task.id,
            "TASKFLEET_BRANCH": task.branch,
            "TASKFLEET_BASE": params.base,
            "TASKFLEET_WORKTREE": str(cwd),
            # The prompt itself only when small (exec refuses a variable over 128 KiB); the file always.
            **({"TASKFLEET_PROMPT": prompt} if len(prompt.encode()) <= 32 * 1024 else {}),
            "TASKFLEET_PROMPT_FILE": str(prompt_file),
        }
        heartbeat = lambda: activity.heartbeat(task.id)  # noqa: E731
        with open(log_path, "a+b") as log:
            executed = await run_command(task.run, cwd, env, log, task.timeout_seconds, heartbeat, "run")
            result.exec_exit_code, result.exec_seconds = executed.exit_code, executed.seconds
            if _step_failed(result, executed, "exec_failed", "executor", task.timeout_seconds):
                result.output_tail = tail(log)
                return False
            verified = await run_command(task.verify, cwd, env, log, task.timeout_seconds, heartbeat, "verify")
            result.verify_exit_code, result.verify_seconds = verified.exit_code, verified.seconds
            result.output_tail = tail(log)
        if _step_failed(result, verified, "verify_failed", f"verification `{task.verify}`", task.timeout_seconds):
            return False
        result.status = TASK_SUCCEEDED
        return True

    async def _write_prompt(self, params: TaskInput, log_path: Path) -> tuple[Path, str]:
        """Render the prompt and write it beside the log (outside the worktree: never committed)."""
        prompt = await self._prompt(params)
        prompt_file = log_path.with_suffix(".prompt.md")
        prompt_file.parent.mkdir(parents=True, exist_ok=True)
        prompt_file.write_text(prompt)
        return prompt_file, prompt

    async def _prompt(self, params: TaskInput) -> str:
        task = params.task
        query = LessonQuery(task_type=task.task_type, activity_type=task.activity_type, limit=PROMPT_LESSONS)
        lessons = [asdict(m.lesson) for m in self.lessons.query(query)]
        context = {"task": asdict(task), "board": {"base": params.base, "land": params.land}, "lessons": lessons}
        try:
            if task.template.endswith(TEMPLATE_SUFFIXES) and "{" not in task.template:
                return self.templates.render(task.template, context).text
            return (await self.templates.render_with_limit(task.template, context)).text
        except TemplateRenderError as err:
            raise ApplicationError(f"task {task.id}: {err}", type="TemplateError", non_retryable=True) from None

    async def _land(self, params: TaskInput, result: TaskResult) -> None:
        """Hand the branch to the clone's GitBatchWorkflow; it tells the orchestrator when it lands."""
        task = params.task
        op = GitOp(
            op_type="merge" if params.land == "merge" else "push",
            branch=task.branch,
            target=params.base if params.land == "merge" else "",
            id=landing_op_id(params.run_key, task.id),
            reply_to=params.reply_to,
            message=f"Merge {task.id}: {task.scope}"[:200] if params.land == "merge" else "",
            # A task branch belongs to taskfleet: a re-run replaces what an earlier run pushed.
            force=params.land != "merge",
        )
        config = GitBatchConfig(
            repo=params.repo, remote=params.remote, max_batch_size=params.git_max_batch_size,
            max_batch_age_seconds=params.git_max_batch_age_seconds,
        )
        client = activity.client()

        async def start(options: dict) -> object:
            return await client.start_workflow(
                GIT_BATCH_WORKFLOW, config, start_signal=SIGNAL_ENQUEUE, start_signal_args=[op_payload(op)], **options
            )

        await with_start_options(start, config, params.git_task_queue)
        result.landing_op_id = op.id

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


def _step_failed(result: TaskResult, ran: CommandResult, failure_type: str, what: str, timeout: float) -> bool:
    """Record a failed executor or verification step on `result`; False when it passed."""
    if not ran.timed_out and ran.exit_code == 0:
        return False
    result.failure_type = "timeout" if ran.timed_out else failure_type
    result.reason = f"{what} timed out after {timeout:g}s" if ran.timed_out else f"{what} exited with {ran.exit_code}"
    return True


def _tree_of(repo_path: str, commit: str) -> str:
    repo = Repo(repo_path)
    try:
        return repo.git.rev_parse(f"{commit}^{{tree}}")
    finally:
        repo.close()


def _check_out(worktree: Path, commit: str) -> None:
    """Point the task branch (checked out in the worktree) at a cached commit."""
    repo = Repo(worktree)
    try:
        repo.git.reset("--hard", commit)
    finally:
        repo.close()


def _commit(worktree: Path, task_id: str, scope: str, run_key: str) -> str:
    repo = Repo(worktree)
    try:
        repo.git.add("-A")
        title = f"{task_id}: {scope}" if scope else task_id
        repo.git.commit(
            "--allow-empty", "-m", title[:200], "-m", f"{TASK_TRAILER}: {task_id}\n{RUN_TRAILER}: {run_key}",
            env=commit_env(repo),
        )
        return repo.head.commit.hexsha
    finally:
        repo.close()
