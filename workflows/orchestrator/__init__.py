"""`OrchestratorWorkflow`: run a board's open tasks in parallel, at most `max_parallel` at once. The
definition (run loop, messages, cancellation) over its parts: `run.py` (shared state), `checks.py`,
`window.py` (the sliding window, results, continue-as-new), `landings.py` (push, merge or queue),
`recorder.py` and `views.py`."""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ApplicationError

from taskfleet.workflows import compat
from taskfleet.workflows.orchestrator.checks import check_task_env, claim_branches, resolve_base
from taskfleet.workflows.orchestrator.landings import landings_for
from taskfleet.workflows.orchestrator.run import RunState
from taskfleet.workflows.orchestrator.views import Views
from taskfleet.workflows.orchestrator.window import TASK_RETRY, Window

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.boards import BoardError, check_board_settings, validate_board
    from taskfleet.core.models.git_batch import GitOpsLanded
    from taskfleet.core.models.merge_queue import QueueOutcomes
    from taskfleet.core.models.orchestrator import (
        TASK_CANCELLED,
        TASK_PENDING,
        OrchestratorInput,
        OrchestratorProgress,
        OrchestratorResult,
        TaskOutcome,
    )
    from taskfleet.core.names import (
        ORCHESTRATOR_WORKFLOW,
        QUERY_PROGRESS,
        SIGNAL_GIT_OPS_LANDED,
        SIGNAL_QUEUE_OUTCOMES,
        SIGNAL_TASK_STAGE,
    )
    from taskfleet.core.task_stage import InvalidStage, describe_refused, parse_task_stage

__all__ = ["OrchestratorWorkflow", "TASK_RETRY"]


# Unsandboxed: the sandbox made every payload cost event-loop time; it imports only workflow APIs
# and pure models, and tests replay it sandboxed. PINNED: a board stays on the version it began on.
@workflow.defn(name=ORCHESTRATOR_WORKFLOW, sandboxed=False,
               versioning_behavior=VersioningBehavior.PINNED)
class OrchestratorWorkflow:
    @workflow.init
    def __init__(self, params: OrchestratorInput) -> None:
        self.state = RunState(params)
        self.s = self.state.s
        self.landings = landings_for(self.state)
        self.views = Views(self.state, self.landings)
        self.window = Window(self.state, self.landings, self.views.refresh)

    @workflow.run
    async def run(self, params: OrchestratorInput) -> OrchestratorResult:
        run, s = self.state, self.s
        if not s.started_at:
            s.started_at = workflow.now().isoformat()
        if run.max_parallel < 1:
            raise ApplicationError("max_parallel must be at least 1", non_retryable=True)
        if s.stats.runs == 1 and not run.paged:
            await self._first_run(run.params)
        if not s.run_key:
            s.run_key = compat.unkeyed_run_key()
        s.stats.largest_history_length = max(s.stats.largest_history_length,
                                             workflow.info().get_current_history_length())
        workflow.logger.info("board %s: %d pending of %d, max_parallel %d (run %d)",
                             params.board.name, len(s.pending), len(s.outcomes),
                             run.max_parallel, s.stats.runs)
        try:
            while True:
                await self.window.dispatch()
                if run.draining:
                    return await self.window.continue_as_new()
                await self.landings.await_all()
                if not s.pending:
                    break  # tasks the merge queue sent back go round again (only land = "queue")
            if run.paged:
                await run.recorder.flush()
                return self.views.result(await run.recorder.small_run_outcomes())
        except asyncio.CancelledError:
            await self._cancel_everything()
            raise
        return self.views.result(list(s.outcomes.values()))

    async def _first_run(self, params: OrchestratorInput) -> None:
        """What a board must pass before anything starts; then its tasks are read from the clone."""
        try:  # started by hand with JSON, the input has not been through the board parser
            if params.board_ref is None:
                validate_board(params.board, "OrchestratorWorkflow input")
            else:  # the tasks are in the clone: each page is validated as it is loaded
                check_board_settings(params.board, "OrchestratorWorkflow input")
        except BoardError as err:
            raise ApplicationError(f"board refused: {err}", type="BoardError",
                                   non_retryable=True) from None
        if not params.repo.startswith("/"):
            raise ApplicationError(f"repo {params.repo!r} must be an absolute path on the worker",
                                   non_retryable=True)
        await check_task_env(params)
        if not params.board.base:
            await resolve_base(params)
        if not self.s.run_key:
            info = workflow.info()
            # By first run id: a rerun under this id never reuses its commits or landing op ids.
            self.s.run_key = compat.run_key(f"{info.workflow_id}@{info.first_execution_run_id}")
        if params.board_ref is not None or compat.board_in_pages():
            await self.window.start_paging()  # branches are claimed a page at a time
        elif compat.branches_claimed_up_front():
            tasks = self.state.tasks
            await claim_branches(params,
                                 [tasks[t].branch for t in self.s.pending if tasks[t].worktree])

    async def _cancel_everything(self) -> None:
        """Cancel running tasks and wait until each has cleaned up (killed its processes, removed
        its worktree); pending tasks never start. What landed stays landed."""
        run, s = self.state, self.s
        handles = list(dict.fromkeys(run.running.values()))  # a task group runs several tasks
        for handle in handles:
            handle.cancel()
        if handles:
            await workflow.wait(handles)
        for task_id in s.pending:
            if run.paged:
                s.outcomes[task_id] = TaskOutcome(id=task_id)
            run.set_status(s.outcomes[task_id], TASK_CANCELLED, "not started")
            run.after_task(task_id)
        s.pending = []
        if run.paged:  # rows never loaded: counted as cancelled (the run store lists what ran)
            run.tally[TASK_CANCELLED] += run.tally[TASK_PENDING]
            run.tally[TASK_PENDING] = 0
        if s.awaiting_landing:
            await self.landings.await_after_cancel()
        if run.paged:
            waiting = list(s.awaiting_landing.values())
            s.awaiting_landing.clear()
            for task_id in waiting:
                run.after_task(task_id)
            await run.recorder.flush()

    # --- messages and the query ----------------------------------------------------------------

    @workflow.signal(name=SIGNAL_TASK_STAGE)
    def task_stage(self, *args: object) -> None:
        """From a task's activity or child workflow. Takes any input and never raises: a bad one
        is listed under `rejected` in `progress`; a stage of a task not running is dropped."""
        try:
            stage = parse_task_stage(args)
        except InvalidStage as err:
            self.views.refused.append(describe_refused(args, str(err)))
            workflow.logger.warning("refused a task_stage signal: %s", err)
            return
        except Exception as err:  # noqa: BLE001 - an escaping exception would wedge the workflow
            self.views.refused.append(describe_refused((), f"unreadable ({type(err).__name__})"))
            return
        self.window.on_stage(stage.task_id, stage.stage, stage.verdict)

    @workflow.signal(name=SIGNAL_GIT_OPS_LANDED)
    def git_ops_landed(self, message: GitOpsLanded) -> None:
        """From the clone's git batcher (or its push activity)."""
        self.landings.receive_git(message)
        self.views.refresh()

    @workflow.signal(name=SIGNAL_QUEUE_OUTCOMES)
    def queue_outcomes(self, message: QueueOutcomes) -> None:
        """From the merge queue of a `land = "queue"` board."""
        self.landings.receive_queue(message)
        self.views.refresh()

    @workflow.query(name=QUERY_PROGRESS)
    def progress(self) -> OrchestratorProgress:
        """Counts by state (and landed), running tasks, and every task's status (a paged run: the
        tasks in flight and the last few finished; the run store has every finished one)."""
        return self.views.progress()
