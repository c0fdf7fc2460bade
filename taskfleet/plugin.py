"""`TaskfleetPlugin`: adds taskfleet's workflows and activities to any Temporal worker. It owns the
worker-memory services (lessons index, template cache, result cache) and the activities that read
them: they start in the worker's run context (a broken template stops that start with one clear
line), never on a `Replayer`, which must not touch the file system."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowHistory
from temporalio.plugin import SimplePlugin
from temporalio.worker import Replayer, Worker, WorkerConfig, WorkflowReplayResult, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from taskfleet.activities.board_store import BoardStoreActivities
from taskfleet.activities.git_push import GitPushActivities
from taskfleet.activities.judge import JudgeActivities
from taskfleet.activities.lessons import LessonsActivities
from taskfleet.activities.llm import LLMActivities
from taskfleet.activities.llm_api import LLMApiActivities
from taskfleet.activities.merge_queue import MergeQueueActivities
from taskfleet.activities.model_io.payload_store import payload_store
from taskfleet.activities.plan import PlanActivities
from taskfleet.activities.pods.presence import WorkerPresence
from taskfleet.activities.processes.executor_policy import ExecutorPolicy, using_policy
from taskfleet.activities.processes.executor_records import TOKEN_VARIABLE
from taskfleet.activities.processes.process_trees import ProcessTreesUnavailable, Watchdog, detect
from taskfleet.activities.run_checks import RunCheckActivities
from taskfleet.activities.services.lessons_journals import lessons_index_for
from taskfleet.activities.services.result_cache import ResultCache
from taskfleet.activities.services.template_cache import TemplateCache
from taskfleet.activities.task_group import TaskGroupActivities
from taskfleet.activities.task_runner import TaskActivities
from taskfleet.activities.workspace import Workspace
from taskfleet.coordination import coordination_worker
from taskfleet.core.errors import StartupError
from taskfleet.core.llm_settings import LLMSettings
from taskfleet.core.settings import TaskfleetSettings
from taskfleet.core.task_env import TaskEnvironment
from taskfleet.workflows.git_batcher import GitBatchWorkflow
from taskfleet.workflows.judge.workflow import JudgeWorkflow
from taskfleet.workflows.lease_lock import LeaseLockWorkflow
from taskfleet.workflows.lessons_query import LessonsQueryWorkflow
from taskfleet.workflows.llm.batcher import LLMBatchWorkflow
from taskfleet.workflows.llm.task import LLMTaskWorkflow
from taskfleet.workflows.merge_queue import MergeQueueWorkflow
from taskfleet.workflows.orchestrator import OrchestratorWorkflow
from taskfleet.workflows.planner import PlannerWorkflow

log = logging.getLogger("taskfleet.plugin")

WORKFLOWS: list[type] = [GitBatchWorkflow, OrchestratorWorkflow, LessonsQueryWorkflow,
                         LLMBatchWorkflow, LLMTaskWorkflow, LeaseLockWorkflow, MergeQueueWorkflow,
                         PlannerWorkflow, JudgeWorkflow]
# How often a worker drops dead workers' worktree registrations (their presence lease expired).
SWEEP_SECONDS = 10.0

# Modules a user's sandboxed workflow may import (through `from taskfleet import TaskfleetPlugin`
# too) unsandboxed: GitPython runs `git` when first imported, which the sandbox forbids.
SANDBOX_PASSTHROUGH = ("taskfleet", "git", "gitdb", "smmap", "jinja2", "markupsafe",
                       "anthropic", "httpx")


class WorkerServices:
    """The worker-memory services and the objects whose bound methods are our activities; cheap to
    build: loading (lessons, templates, cache database) happens in `running()`."""

    def __init__(self, settings: TaskfleetSettings) -> None:
        self.settings = settings
        self.lessons = lessons_index_for(settings)  # journals in a shared folder, or one file
        self.templates = TemplateCache(settings.templates_dir)
        self.result_cache = ResultCache(settings.result_cache_path,
                                        settings.result_cache_memory_bytes)
        self.git = GitPushActivities()
        self.lesson_activities = LessonsActivities(self.lessons)
        self.workspace = Workspace(settings)
        self.tasks = TaskActivities(settings, self.lessons, self.templates, self.result_cache,
                                    self.workspace)
        self.run_checks = RunCheckActivities(settings)
        llm = LLMSettings()
        try:
            self.payloads = payload_store(settings.payload_store, settings.payloads_dir)
        except ValueError as err:
            raise StartupError(str(err)) from None
        memory = (self.lessons, self.templates, self.result_cache, self.workspace, self.payloads)
        self.llm = LLMActivities(settings, llm, *memory)
        self.llm_api = LLMApiActivities(llm, self.payloads)
        self.plans = PlanActivities(llm, self.lessons, self.templates, self.payloads)
        self.judges = JudgeActivities(settings, llm, *memory)
        self.boards = BoardStoreActivities()
        self.task_groups = TaskGroupActivities(self.tasks)
        self.merge_queue = MergeQueueActivities(settings, self.workspace)
        self.policy: ExecutorPolicy | None = None  # decided at start: a probe starts a process
        self.started = False

    def activities(self) -> list[Callable]:
        return [self.git.push_batch, self.lesson_activities.query_lessons,
                self.lesson_activities.record_lesson, self.lesson_activities.lessons_stats,
                self.tasks.run_task, self.tasks.land_task, self.run_checks.claim_branches,
                self.run_checks.check_task_env, self.run_checks.default_branch,
                *self.llm.activities(), *self.llm_api.activities(), *self.plans.activities(),
                *self.judges.activities(), self.boards.store_board, self.boards.load_board_page,
                self.boards.record_outcomes, self.boards.read_outcomes,
                self.task_groups.run_task_group, *self.merge_queue.activities()]

    async def start(self) -> None:
        self.settings.logs_dir.mkdir(parents=True, exist_ok=True)
        self.policy = await asyncio.to_thread(self._executor_policy)
        names = self.templates.load()
        stats = await asyncio.to_thread(self.lessons.load)
        if stats.malformed_lines:
            log.warning("lessons file %s: skipped %d malformed line(s), first at lines %s",
                        stats.path, stats.malformed_lines, stats.malformed_line_numbers[:10])
        await asyncio.to_thread(self.result_cache.open)
        await self.llm_api.preload()
        stale = await asyncio.to_thread(self.workspace.prune_stale)
        await asyncio.to_thread(self.workspace.scratch.prune_stale)
        if stale:
            log.warning("removed %d worktree(s) left by a crashed worker: %s", len(stale),
                        ", ".join(map(str, stale)))
        log.info("taskfleet services: %d lessons in %.2fs, %d templates (%s), result cache %s, "
                 "payload store %s", stats.lessons, stats.build_seconds, len(names),
                 ", ".join(names), self.settings.result_cache_path, self.payloads.url)
        self.started = True

    def _executor_policy(self) -> ExecutorPolicy:
        """What task processes see and how they die with the worker, decided (and logged) once."""
        try:
            trees = detect(self.settings.process_trees)
        except ProcessTreesUnavailable as err:
            raise StartupError(str(err)) from None
        environment = TaskEnvironment(self.settings.task_env)
        if any(pattern in ("*", "?*") for pattern in environment.allow):
            log.warning("TASKFLEET_TASK_ENV %s lets tasks see every worker variable, credentials "
                        "included", ",".join(environment.allow))
        log.info("taskfleet task processes: %s", trees.describe())
        if not trees.namespaced:
            pid = Watchdog.ensure(TOKEN_VARIABLE)
            log.info("taskfleet task processes: watchdog pid %d kills this worker's task processes "
                     "if it dies", pid)
        log.info("taskfleet task environment: %s", environment.describe())
        return ExecutorPolicy(environment, trees)

    def stop(self) -> None:
        self.started = False
        self.result_cache.close()

    @asynccontextmanager
    async def running(self, client: Client | None = None,
                      task_queue: str = "") -> AsyncIterator[None]:
        await self.start()
        presence = keeper = None
        if client is not None:
            # The presence lease is taken once the worker polls (this worker may be the only one
            # running the lock workflow); tasks wait for it before registering worktrees.
            presence = WorkerPresence(client, self.settings.coordination_task_queue,
                                      self.settings.pod_id)
            self.workspace.worktrees.presence = presence
            keeper = asyncio.create_task(self._keep_presence(presence), name="taskfleet presence")
        try:
            yield
        finally:
            try:
                await self.workspace.stop()  # drain the worktree pool
            finally:
                if keeper is not None:
                    keeper.cancel()
                    await asyncio.gather(keeper, return_exceptions=True)
                if presence is not None:
                    await presence.stop()
                self.stop()

    async def _keep_presence(self, presence: WorkerPresence) -> None:
        """Hold this worker's presence lease, and drop dead workers' worktrees now and then."""
        try:
            await presence.start()
        except Exception as err:  # noqa: BLE001 - tasks then wait and fail with the reason
            log.error("could not take this worker's presence lease: %s", err)
            return
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            try:
                await presence.ensure()
                removed = await self.workspace.worktrees.sweep()
            except Exception as err:  # noqa: BLE001 - housekeeping: the next round tries again
                log.warning("sweep of dead workers' worktrees failed: %s", err)
                continue
            if removed:
                log.warning("removed %d worktree registration(s) of gone workers", len(removed))


def _appending(extra: Callable[[], Sequence[Any]]) -> Callable[[Sequence[Any] | None], list[Any]]:
    """A plugin parameter that keeps what the user configured and adds ours after it."""

    def extend(existing: Sequence[Any] | None) -> list[Any]:
        return [*(existing or []), *extra()]

    return extend


def _with_passthrough(runner: WorkflowRunner | None) -> WorkflowRunner | None:
    """The user's workflow runner, with our modules passed through if it is the sandbox."""
    if isinstance(runner, SandboxedWorkflowRunner):
        restrictions = runner.restrictions.with_passthrough_modules(*SANDBOX_PASSTHROUGH)
        return dataclasses.replace(runner, restrictions=restrictions)
    return runner


class TaskfleetPlugin(SimplePlugin):
    """Use as `Worker(client, task_queue="taskfleet", plugins=[TaskfleetPlugin()])`."""

    def __init__(self, settings: TaskfleetSettings | None = None) -> None:
        self.settings = settings or TaskfleetSettings()
        self.services = WorkerServices(self.settings)
        super().__init__("taskfleet.TaskfleetPlugin", workflows=_appending(lambda: WORKFLOWS),
                         activities=_appending(self.services.activities),
                         workflow_runner=_with_passthrough)

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """A cancel reaches a task only in a heartbeat's answer: throttled to 1 s, not the SDK's
        60 s (unless set); an unversioned worker must not send our versioning behavior."""
        from taskfleet.versioning import UnversionedRunner, uses_worker_versioning

        config = super().configure_worker(config)
        sdk_default, ours = timedelta(seconds=60), timedelta(seconds=1)
        if config.get("max_heartbeat_throttle_interval", sdk_default) == sdk_default:
            config["max_heartbeat_throttle_interval"] = ours
        if not uses_worker_versioning(config):
            for key in ("workflow_runner", "unsandboxed_workflow_runner"):
                if config.get(key) is not None:
                    config[key] = UnversionedRunner(config[key])  # type: ignore[literal-required]
        return config

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        from taskfleet.clients.search_attributes import ensure_search_attributes

        notice = await ensure_search_attributes(worker.client)
        if notice:
            log.warning("%s", notice)
        async with self._coordination(worker), \
                self.services.running(worker.client, worker.task_queue):
            assert self.services.policy is not None
            # Every activity task this worker starts inherits its rules (a context variable).
            with using_policy(self.services.policy):
                await next(worker)

    def _coordination(self, worker: Worker) -> AbstractAsyncContextManager[Any]:
        """The lease locks' task queue, polled beside the worker's own: entered before the services
        (the presence lease needs it), left after them (their last release reaches it)."""
        from taskfleet.versioning import UnversionedRunner

        queue = self.settings.coordination_task_queue
        if worker.task_queue == queue:
            return contextlib.nullcontext()
        runner = _with_passthrough(SandboxedWorkflowRunner())
        assert runner is not None
        return coordination_worker(worker.client, queue, UnversionedRunner(runner))

    def run_replayer(
        self,
        replayer: Replayer,
        histories: AsyncIterator[WorkflowHistory],
        next: Callable[
            [Replayer, AsyncIterator[WorkflowHistory]],
            AbstractAsyncContextManager[AsyncIterator[WorkflowReplayResult]],
        ],
    ) -> AbstractAsyncContextManager[AsyncIterator[WorkflowReplayResult]]:
        """Replaying touches no file and starts no service: straight to the next plugin."""
        return next(replayer, histories)
