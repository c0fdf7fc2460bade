"""`OrchestratorWorkflow`: run a board's open tasks in parallel, at most `max_parallel` at once.

Each task is one `run_task` activity (worktree, executor, verification, commit); its branch lands
through the clone's `GitBatchWorkflow`, which signals `git_ops_landed` back here. History stays
bounded: past the server's suggestion the workflow stops dispatching, lets running tasks finish,
and continues as new with only what is not done yet, compact outcomes and counters.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Optional

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, ChildWorkflowError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.boards import BoardError, validate_board
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.ids import git_batch_workflow_id, landing_op_id, task_of_landing_op
    from taskfleet.core.models.git_batch import OUTCOME_FAILED, GitOpsLanded, OpOutcome
    from taskfleet.core.models.orchestrator import (
        TASK_CANCELLED,
        TASK_FAILED,
        TASK_PENDING,
        TASK_RUNNING,
        TASK_SUCCEEDED,
        BranchClaim,
        OrchestratorInput,
        OrchestratorProgress,
        OrchestratorResult,
        OrchestratorState,
        TaskInput,
        TaskOutcome,
        TaskProgress,
        TaskResult,
        TaskSpec,
    )
    from taskfleet.core.names import (
        ACTIVITY_CLAIM_BRANCHES,
        ACTIVITY_RUN_TASK,
        ORCHESTRATOR_WORKFLOW,
        PATCH_CLAIM_BRANCHES,
        PATCH_RUN_KEY_FIRST_RUN,
        QUERY_PROGRESS,
        SIGNAL_FLUSH,
        SIGNAL_GIT_OPS_LANDED,
    )

from taskfleet.workflows.activity_names import activity_name
from taskfleet.workflows.llm_dispatch import ANTHROPIC, add_llm_usage, run_llm_task

TASK_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=20),
    maximum_attempts=3,
    non_retryable_error_types=["BadTaskSetup", "TemplateError"],
)
CLAIM_RETRY = RetryPolicy(maximum_attempts=5, non_retryable_error_types=["BranchesHeld"])
# After a cancel: how long to wait for landing outcomes of ops already sent (they land anyway).
CANCEL_LANDING_WAIT = timedelta(seconds=60)


def landed_commit(outcome: OpOutcome) -> str:
    """The commit of the op's branch that landed: `branch_commit` (C1); a batcher that predates
    it reports a push's branch commit in `commit`."""
    return outcome.branch_commit or (outcome.commit if outcome.op_type == "push" else "")


def _batcher_id(repo: str, remote: str, task_queue: str) -> str:
    """Contract C2: the batcher of this clone and remote on the queue its pushes run on."""
    return git_batch_workflow_id(repo, remote, task_queue=task_queue)


def _summary(task: TaskSpec) -> str:
    """`T2.3: Prompt template caching`: the task id and the head of its scope, for the UI."""
    head = task.scope.split(":")[0].strip()
    return f"{task.id}: {head}"[:100] if head else task.id


# Unsandboxed, measured: SDK 1.35 asks a sandboxed instance for the serialization context of every
# payload of every activation, each time by exec-ing code inside the sandbox, which cost ~0.7 ms
# of the worker's event loop per task (1,000 no-op tasks: 5.6 -> 4.9 ms each). This module still
# imports only workflow APIs and pure models, and tests/test_replay.py replays its histories
# inside the sandbox, so a non-deterministic call here still fails CI.
# Worker Versioning: PINNED. A board runs for hours, and its history was made by one version's
# code: pinned, a running board stays on the version it started on (and finishes there) while new
# boards start on the current version; the old version drains as its boards end.
@workflow.defn(name=ORCHESTRATOR_WORKFLOW, sandboxed=False, versioning_behavior=VersioningBehavior.PINNED)
class OrchestratorWorkflow:
    @workflow.init
    def __init__(self, params: OrchestratorInput) -> None:
        self.params = params
        board = params.board
        for task in board.tasks:  # the same default the board parser applies
            task.branch = task.branch or f"task/{task.id}"
        self.tasks: dict[str, TaskSpec] = {t.id: t for t in board.tasks}
        if params.state is None:
            self.s = OrchestratorState(
                pending=[t.id for t in board.tasks if not t.done],
                outcomes={t.id: TaskOutcome(id=t.id) for t in board.tasks if not t.done},
            )
        else:
            self.s = params.state
        self.max_parallel = params.max_parallel or board.max_parallel
        self.git_workflow_id = _batcher_id(params.repo, params.remote, params.git_task_queue or workflow.info().task_queue)
        self._running: dict[str, asyncio.Task] = {}
        self._draining = False
        # Landing outcomes that arrived before their task's result (op id -> outcome, batch id).
        self._early: dict[str, tuple[OpOutcome, str]] = {}
        # Counts by state, kept as statuses change: the UI details and `progress` stay O(1) per
        # event instead of a walk over every task of a 2,000-task board.
        self._tally = {name: 0 for name in (TASK_PENDING, TASK_RUNNING, TASK_SUCCEEDED, TASK_FAILED, TASK_CANCELLED)}
        self._tally["landed"] = 0
        for outcome in self.s.outcomes.values():
            self._tally[outcome.status] += 1
            self._tally["landed"] += outcome.landed

    def _set_status(self, outcome: TaskOutcome, status: str, reason: Optional[str] = None) -> None:
        self._tally[outcome.status] -= 1
        self._tally[status] += 1
        outcome.status = status
        if reason is not None:
            outcome.reason = reason

    @workflow.run
    async def run(self, params: OrchestratorInput) -> OrchestratorResult:
        if not self.s.started_at:
            self.s.started_at = workflow.now().isoformat()
        if self.max_parallel < 1:
            raise ApplicationError("max_parallel must be at least 1", non_retryable=True)
        if self.s.stats.runs == 1:
            try:  # started by hand with JSON, the input has not been through the board parser
                validate_board(params.board, "OrchestratorWorkflow input")
            except BoardError as err:
                raise ApplicationError(f"board refused: {err}", type="BoardError", non_retryable=True) from None
            if not params.repo.startswith("/"):
                raise ApplicationError(f"repo {params.repo!r} must be an absolute path on the worker", non_retryable=True)
            if not self.s.run_key:
                info = workflow.info()
                # Keyed by the first run id: a later run with the same workflow id (`run --id X`
                # again) never resumes this run's commits nor repeats its landing op ids.
                self.s.run_key = (
                    f"{info.workflow_id}@{info.first_execution_run_id}"
                    if workflow.patched(PATCH_RUN_KEY_FIRST_RUN) else info.workflow_id
                )
            if workflow.patched(PATCH_CLAIM_BRANCHES):
                await self._claim_branches()
        if not self.s.run_key:
            self.s.run_key = workflow.info().workflow_id  # continued from a run that predates the key
        self.s.stats.largest_history_length = max(
            self.s.stats.largest_history_length, workflow.info().get_current_history_length()
        )
        workflow.logger.info(
            "board %s: %d pending of %d, max_parallel %d (run %d)",
            params.board.name, len(self.s.pending), len(self.s.outcomes), self.max_parallel, self.s.stats.runs,
        )
        try:
            await self._dispatch()
            if self._draining:
                return await self._continue_as_new()
            await self._await_landing()
        except asyncio.CancelledError:
            await self._cancel_everything()
            raise
        return self._result()

    async def _claim_branches(self) -> None:
        """Refuse to start when another running run holds some of this board's branches."""
        branches = [self.tasks[t].branch for t in self.s.pending if self.tasks[t].worktree]
        if not branches:
            return
        info = workflow.info()
        try:
            await workflow.execute_activity(
                ACTIVITY_CLAIM_BRANCHES,
                BranchClaim(self.params.repo, branches, info.workflow_id, info.first_execution_run_id),
                start_to_close_timeout=timedelta(seconds=120),
                heartbeat_timeout=timedelta(seconds=self.params.heartbeat_timeout_seconds),
                retry_policy=CLAIM_RETRY,
                summary=f"claim {len(branches)} task branch(es)",
            )
        except ActivityError as err:
            raise ApplicationError(
                f"board refused: {root_cause_message(err)}", type="BranchesHeld", non_retryable=True
            ) from None

    # --- dispatch --------------------------------------------------------------------------------

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        length = info.get_current_history_length()
        self.s.stats.largest_history_length = max(self.s.stats.largest_history_length, length)
        if info.is_continue_as_new_suggested():
            return True
        limit = self.params.max_history_events
        return bool(limit) and length >= limit

    async def _dispatch(self) -> None:
        """Sliding window: start a task whenever a slot is free, until none is pending."""
        while self.s.pending:
            await workflow.wait_condition(lambda: len(self._running) < self.max_parallel)
            if self._should_continue_as_new():
                self._draining = True
                break
            task_id = self.s.pending.pop(0)
            self._running[task_id] = asyncio.create_task(self._run_one(self.tasks[task_id]))
            self.s.stats.max_running = max(self.s.stats.max_running, len(self._running))
            self._refresh_details()
        await workflow.wait_condition(lambda: not self._running)

    async def _run_one(self, task: TaskSpec) -> None:
        outcome = self.s.outcomes[task.id]
        self._set_status(outcome, TASK_RUNNING)
        try:
            task_input = TaskInput(
                task=task,
                repo=self.params.repo,
                remote=self.params.remote,
                base=self.params.board.base,
                land=self.params.board.land,
                run_key=self.s.run_key,
                reply_to=workflow.info().workflow_id,
                git_task_queue=self.params.git_task_queue or workflow.info().task_queue,
                git_max_batch_size=self.params.git_max_batch_size,
                git_max_batch_age_seconds=self.params.git_max_batch_age_seconds,
            )
            if task.implementer == ANTHROPIC:  # the built-in Claude implementer runs as a child workflow
                result = await run_llm_task(task_input, _summary(task))
            else:
                result = await workflow.execute_activity(
                    activity_name(ACTIVITY_RUN_TASK),
                    task_input,
                    result_type=TaskResult,
                    start_to_close_timeout=timedelta(seconds=2 * task.timeout_seconds + 120),
                    heartbeat_timeout=timedelta(seconds=self.params.heartbeat_timeout_seconds),
                    retry_policy=TASK_RETRY,
                    cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                    summary=_summary(task),
                )
        except asyncio.CancelledError:
            self._set_status(outcome, TASK_CANCELLED, "cancelled")
        except (ActivityError, ChildWorkflowError) as err:
            if isinstance(err.cause, CancelledError):
                self._set_status(outcome, TASK_CANCELLED, "cancelled")
            else:
                self._set_status(outcome, TASK_FAILED, root_cause_message(err))
            workflow.logger.warning("task %s: %s", task.id, outcome.reason)
        else:
            self._set_status(outcome, result.status)
            outcome.commit, outcome.seconds, outcome.reason = result.commit, result.seconds, result.reason
            outcome.cache_hit, outcome.log_path = result.cache_hit, result.log_path
            stats = self.s.stats
            stats.task_seconds += result.seconds
            stats.work_seconds += (result.exec_seconds or 0.0) + (result.verify_seconds or 0.0)
            stats.setup_seconds += result.setup_seconds
            stats.wait_seconds += result.wait_seconds
            add_llm_usage(self.s, outcome, result)
            if result.status == TASK_SUCCEEDED:
                self.s.stats.cache_hits += int(result.cache_hit)
                self.s.stats.cache_misses += int(not result.cache_hit and not result.resumed)
                if result.landing_op_id and not outcome.landed:
                    self._expect_landing(task.id, result)
        finally:
            self._running.pop(task.id, None)
            self._refresh_details()

    async def _cancel_everything(self) -> None:
        """Cancel running tasks and wait until each has cleaned up (killed its processes, removed
        its worktree); pending tasks never start. What landed stays landed."""
        for handle in self._running.values():
            handle.cancel()
        if self._running:
            await workflow.wait(list(self._running.values()))
        for task_id in self.s.pending:
            self._set_status(self.s.outcomes[task_id], TASK_CANCELLED, "not started")
        self.s.pending = []
        if self.s.awaiting_landing:
            # Ops already sent land anyway (a push may be in flight): wait, bounded, for their
            # outcomes so that what the run reports as landed is what the remote holds.
            try:
                await workflow.get_external_workflow_handle(self.git_workflow_id).signal(SIGNAL_FLUSH)
            except Exception as err:  # noqa: BLE001 - the age flush still lands them
                workflow.logger.warning("could not ask %s to flush: %s", self.git_workflow_id, err)
            try:
                await workflow.wait_condition(
                    lambda: not self.s.awaiting_landing, timeout=CANCEL_LANDING_WAIT,
                    timeout_summary="cancelled: wait for pushes already sent",
                )
            except asyncio.TimeoutError:
                for task_id in self.s.awaiting_landing.values():
                    self.s.outcomes[task_id].reason = "cancelled before its landing was reported"

    # --- landing ---------------------------------------------------------------------------------

    def _expect_landing(self, task_id: str, result: TaskResult) -> None:
        """The task's landing op was sent: wait for its outcome, by op id and commit."""
        op_id = result.landing_op_id
        self.s.awaiting_landing[op_id] = task_id
        self.s.landing_commits[op_id] = result.commit
        self.s.landing_sent_at[op_id] = workflow.now().timestamp()
        early = self._early.pop(op_id, None)
        if early is not None:
            self._apply_landing(op_id, *early)

    @workflow.signal(name=SIGNAL_GIT_OPS_LANDED)
    def git_ops_landed(self, message: GitOpsLanded) -> None:
        for outcome in message.outcomes:
            if outcome.op_id in self.s.awaiting_landing:
                self._apply_landing(outcome.op_id, outcome, message.batch_id)
                continue
            # The landing may be reported before run_task returned: keep it for the task's result,
            # only for an op id this run sends for a task that is running now.
            task_id = task_of_landing_op(self.s.run_key, outcome.op_id)
            if task_id in self._running and outcome.op_id == landing_op_id(self.s.run_key, task_id):
                self._early[outcome.op_id] = (outcome, message.batch_id)
        self._refresh_details()

    def _apply_landing(self, op_id: str, outcome: OpOutcome, batch_id: str) -> None:
        task_id = self.s.awaiting_landing[op_id]
        task = self.s.outcomes[task_id]
        expected = self.s.landing_commits.get(op_id, "")
        if outcome.status == OUTCOME_FAILED:
            landed, task.reason = False, f"did not land: {outcome.reason}"
        elif landed_commit(outcome) != expected:
            # Not this task's commit on the branch (another client's op with our id, a moved
            # branch): not landed, and keep waiting for the real outcome until the land timeout.
            task.reason = (
                f"did not land: {outcome.branch} landed at {landed_commit(outcome)[:12] or 'an unknown commit'}, "
                f"not the task's commit {expected[:12]}"
            )
            return
        else:
            landed = True
            if batch_id not in self.s.landed_batches:
                self.s.landed_batches.append(batch_id)
            sent = self.s.landing_sent_at.get(op_id)
            if sent is not None:
                self.s.stats.landing_seconds += max(0.0, workflow.now().timestamp() - sent)
        self._tally["landed"] += int(landed) - int(task.landed)
        task.landed = landed
        del self.s.awaiting_landing[op_id]
        self.s.landing_commits.pop(op_id, None)
        self.s.landing_sent_at.pop(op_id, None)

    async def _await_landing(self) -> None:
        """Wait (bounded) until every landing op this run sent has been reported."""
        if self.s.awaiting_landing and not self.s.flush_sent:
            # Every task has finished: land what is queued now rather than at the batch's age.
            self.s.flush_sent = True
            try:
                await workflow.get_external_workflow_handle(self.git_workflow_id).signal(SIGNAL_FLUSH)
            except Exception as err:  # noqa: BLE001 - the age flush still lands them
                workflow.logger.warning("could not ask %s to flush: %s", self.git_workflow_id, err)
        timeout = self.params.land_timeout_seconds
        try:
            await workflow.wait_condition(
                lambda: not self.s.awaiting_landing, timeout=timedelta(seconds=timeout),
                timeout_summary=f"land timeout: give up waiting for pushes after {timeout:g}s",
            )
        except asyncio.TimeoutError:
            for task_id in self.s.awaiting_landing.values():
                outcome = self.s.outcomes[task_id]
                outcome.reason = f"not landed within {timeout:g}s" + (f" ({outcome.reason})" if outcome.reason else "")
            self.s.awaiting_landing.clear()
        await workflow.wait_condition(workflow.all_handlers_finished)

    # --- continue-as-new, results, queries ---------------------------------------------------------

    async def _continue_as_new(self) -> OrchestratorResult:
        await workflow.wait_condition(workflow.all_handlers_finished)
        self.s.stats.runs += 1
        pending = set(self.s.pending)
        board = self.params.board
        board.tasks = [t for t in board.tasks if t.id in pending]  # only what is not done yet
        for outcome in self.s.outcomes.values():
            # Compact: the next run's input must stay well under the payload limit at 2,000 tasks.
            outcome.log_path = ""
            outcome.reason = outcome.reason[:300]
        workflow.logger.info("continuing as new with %d pending tasks", len(pending))
        workflow.continue_as_new(
            OrchestratorInput(**{**self.params.__dict__, "board": board, "state": self.s})
        )

    def _result(self) -> OrchestratorResult:
        stats = self.s.stats
        started = datetime.fromisoformat(self.s.started_at)
        stats.wall_seconds = round((workflow.now() - started).total_seconds(), 3)
        # Speed-up over the tasks' own work (executor + verification), not over time spent waiting
        # for taskfleet: that is reported per task beside it.
        stats.speedup = round(stats.work_seconds / stats.wall_seconds, 2) if stats.wall_seconds else 0.0
        done = sum(1 for t in self.s.outcomes.values() if t.status in (TASK_SUCCEEDED, TASK_FAILED))
        if done:
            own = max(stats.task_seconds - stats.work_seconds, 0.0) + stats.wait_seconds + stats.landing_seconds
            stats.overhead_seconds_per_task = round(own / done, 4)
        stats.pushes = len(self.s.landed_batches)
        stats.network_savings = max(self._tally["landed"] - stats.pushes, 0)
        stats.largest_history_length = max(stats.largest_history_length, workflow.info().get_current_history_length())
        return OrchestratorResult(tasks=list(self.s.outcomes.values()), stats=stats)

    def _counts(self) -> dict[str, int]:
        return dict(self._tally)

    @workflow.query(name=QUERY_PROGRESS)
    def progress(self) -> OrchestratorProgress:
        """Counts by state (and landed), running tasks, and every task's status."""
        return OrchestratorProgress(
            counts=self._counts(),
            running=list(self._running),
            tasks=[TaskProgress(t.id, t.status, t.landed) for t in self.s.outcomes.values()],
            pushes=len(self.s.landed_batches),
        )

    def _refresh_details(self) -> None:
        c = self._counts()
        running = list(self._running)
        workflow.set_current_details(
            f"**{self.params.board.name}** on `{self.params.repo}`\n\n"
            f"- pending {c[TASK_PENDING]}, running {c[TASK_RUNNING]} (max {self.max_parallel})\n"
            f"- succeeded {c[TASK_SUCCEEDED]}, failed {c[TASK_FAILED]}, cancelled {c[TASK_CANCELLED]}\n"
            f"- landed {c['landed']} in {len(self.s.landed_batches)} push(es)\n"
            + (f"- running: {', '.join(running[:10])}\n" if running else "")
        )
