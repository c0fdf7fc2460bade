"""`OrchestratorWorkflow`: run a board's open tasks in parallel, at most `max_parallel` at once.

Each task is one `run_task` activity (worktree, executor, verification, commit); its branch lands
through the clone's `GitBatchWorkflow`, which signals `git_ops_landed` back here, or (`land =
"queue"`) through the target's `MergeQueueWorkflow`, which signals `queue_outcomes`
(workflows/queue_landing.py: a task whose change it sends back is redone). History stays
bounded: past the server's suggestion the workflow stops dispatching, lets running tasks finish,
and continues as new with only what is not done yet, compact outcomes and counters.

Boards by reference (runs started by this version): the board lives in the clone
(`taskfleet.core.board_store`); the workflow loads it a page at a time as its window needs tasks,
writes every finished task's outcome to the run store (`taskfleet.core.run_store`) in batches, and
keeps only counters, the first failed ids and references, so neither its state nor any payload
grows with the board. Tasks without a worktree run many per activity (a task group). Runs started
before (no `taskfleet-board-pages` marker) replay the inline path unchanged.

This module is the workflow's definition: its state, its run, its signals and query, and
cancellation. Its parts, each a module beside it:

- orchestrator_checks.py: what a board must pass before any task starts, and branch claims;
- orchestrator_dispatch.py: the window of running tasks, and each task's result;
- orchestrator_pages.py: a board by reference, loaded a page at a time;
- orchestrator_recorder.py: final outcomes out to the run store;
- orchestrator_landing.py: tasks waiting for their branch to land;
- queue_landing.py: the same through a merge queue, and tasks it sends back;
- orchestrator_carry.py: continue-as-new, and what it carries;
- orchestrator_views.py: the `progress` query, the Web UI's details, the result.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Optional

from temporalio import workflow
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.boards import BoardError, check_board_settings, validate_board
    from taskfleet.core.models.git_batch import GitOpsLanded, OpOutcome
    from taskfleet.core.models.merge_queue import EntryOutcome, QueueOutcomes
    from taskfleet.core.models.orchestrator import (
        TASK_CANCELLED,
        TASK_FAILED,
        TASK_PENDING,
        TASK_RUNNING,
        TASK_SUCCEEDED,
        OrchestratorInput,
        OrchestratorProgress,
        OrchestratorResult,
        OrchestratorState,
        TaskOutcome,
        TaskSpec,
    )
    from taskfleet.core.names import (
        ORCHESTRATOR_WORKFLOW,
        QUERY_PROGRESS,
        SIGNAL_GIT_OPS_LANDED,
        SIGNAL_QUEUE_OUTCOMES,
        SIGNAL_TASK_STAGE,
    )
    from taskfleet.core.task_stage import InvalidStage, describe_refused, parse_task_stage

from taskfleet.workflows import compat
from taskfleet.workflows.compat import landed_commit
from taskfleet.workflows.orchestrator_carry import CarryMixin
from taskfleet.workflows.orchestrator_checks import check_task_env, claim_branches, resolve_base
from taskfleet.workflows.orchestrator_dispatch import TASK_RETRY, TaskDispatchMixin
from taskfleet.workflows.orchestrator_landing import LandingMixin, batcher_id
from taskfleet.workflows.orchestrator_pages import BoardPagesMixin
from taskfleet.workflows.orchestrator_recorder import OutcomeRecorder
from taskfleet.workflows.orchestrator_views import ProgressViewsMixin
from taskfleet.workflows.queue_landing import QueueLandingMixin

# Names this module held before its parts moved beside it.
__all__ = ["OrchestratorWorkflow", "TASK_RETRY", "landed_commit"]

RECENT_REFUSED = 10  # refused `task_stage` signals `progress` lists


# Unsandboxed, measured: SDK 1.35 asks a sandboxed instance for the serialization context of every
# payload of every activation, each time by exec-ing code inside the sandbox, which cost ~0.7 ms
# of the worker's event loop per task (1,000 no-op tasks: 5.6 -> 4.9 ms each). This module and its
# parts still import only workflow APIs and pure models, and tests/test_replay.py replays its
# histories inside the sandbox, so a non-deterministic call here still fails CI.
# Worker Versioning: PINNED. A board runs for hours, and its history was made by one version's
# code: pinned, a running board stays on the version it started on (and finishes there) while new
# boards start on the current version; the old version drains as its boards end.
@workflow.defn(name=ORCHESTRATOR_WORKFLOW, sandboxed=False, versioning_behavior=VersioningBehavior.PINNED)
class OrchestratorWorkflow(
    TaskDispatchMixin, BoardPagesMixin, LandingMixin, QueueLandingMixin, CarryMixin, ProgressViewsMixin
):
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
        self.git_workflow_id = batcher_id(params.repo, params.remote, params.git_task_queue or workflow.info().task_queue)
        self._running: dict[str, asyncio.Task] = {}
        self._draining = False
        # Landing outcomes that arrived before their task's result (op id -> outcome, batch id).
        self._early: dict[str, tuple[OpOutcome, str]] = {}
        self._early_queue: dict[str, EntryOutcome] = {}  # the same from a merge queue, by entry id
        self._queue_news = 0  # queue outcomes received: a wait for landings that sees news goes on
        # Counts by state, kept as statuses change: the UI details and `progress` stay O(1) per
        # event instead of a walk over every task of a 2,000-task board.
        self._tally = {name: 0 for name in (TASK_PENDING, TASK_RUNNING, TASK_SUCCEEDED, TASK_FAILED, TASK_CANCELLED)}
        self._tally["landed"] = 0
        # Paged runs (boards by reference): the tally travels in the state, since outcomes do not.
        self._rows: dict[str, int] = {}  # task id -> its row on the board (tasks loaded, not finished)
        self._run_store = OutcomeRecorder(params.repo, self.s)  # finished, on their way to the run store
        self._loader: Optional[asyncio.Task] = None  # the next page, being loaded
        self._started_here = 0  # tasks this run started: a run starts some before it may continue as new
        # Running tasks' stages (implementing, verifying, judging), from the task's own steps; not
        # carried across continue-as-new (a running task reports its next stage again).
        self._stages: dict[str, str] = {}
        self._refused: deque[str] = deque(maxlen=RECENT_REFUSED)
        if self.s.paging is not None:
            self._tally = self.s.paging.counts
            self._rows = dict(self.s.paging.awaiting_rows)
            self._restore_requeued()
            return
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
        if self.s.stats.runs == 1 and not self._paged:
            try:  # started by hand with JSON, the input has not been through the board parser
                if params.board_ref is None:
                    validate_board(params.board, "OrchestratorWorkflow input")
                else:  # the tasks are in the clone: each page is validated as it is loaded
                    check_board_settings(params.board, "OrchestratorWorkflow input")
            except BoardError as err:
                raise ApplicationError(f"board refused: {err}", type="BoardError", non_retryable=True) from None
            if not params.repo.startswith("/"):
                raise ApplicationError(f"repo {params.repo!r} must be an absolute path on the worker", non_retryable=True)
            await check_task_env(self.params)
            if not params.board.base:
                await resolve_base(self.params)
            if not self.s.run_key:
                info = workflow.info()
                # Keyed by the first run id: a later run with the same workflow id (`run --id X`
                # again) never resumes this run's commits nor repeats its landing op ids.
                self.s.run_key = compat.run_key(f"{info.workflow_id}@{info.first_execution_run_id}")
            if params.board_ref is not None or compat.board_in_pages():
                await self._start_paging()  # branches are claimed a page at a time
            elif compat.branches_claimed_up_front():
                await claim_branches(self.params, [self.tasks[t].branch for t in self.s.pending if self.tasks[t].worktree])
        if not self.s.run_key:
            self.s.run_key = compat.unkeyed_run_key()
        self.s.stats.largest_history_length = max(
            self.s.stats.largest_history_length, workflow.info().get_current_history_length()
        )
        workflow.logger.info(
            "board %s: %d pending of %d, max_parallel %d (run %d)",
            params.board.name, len(self.s.pending), len(self.s.outcomes), self.max_parallel, self.s.stats.runs,
        )
        try:
            while True:
                await (self._dispatch_pages() if self._paged else self._dispatch())
                if self._draining:
                    return await self._continue_as_new()
                await self._await_landing()
                if not self.s.pending:
                    break  # tasks the merge queue sent back go round again (only land = "queue")
            if self._paged:
                await self._run_store.flush()
                return self._result(await self._run_store.small_run_outcomes())
        except asyncio.CancelledError:
            await self._cancel_everything()
            raise
        return self._result(list(self.s.outcomes.values()))

    async def _cancel_everything(self) -> None:
        """Cancel running tasks and wait until each has cleaned up (killed its processes, removed
        its worktree); pending tasks never start. What landed stays landed."""
        handles = list(dict.fromkeys(self._running.values()))  # a task group runs several tasks
        for handle in handles:
            handle.cancel()
        if handles:
            await workflow.wait(handles)
        for task_id in self.s.pending:
            if self._paged:
                self.s.outcomes[task_id] = TaskOutcome(id=task_id)
            self._set_status(self.s.outcomes[task_id], TASK_CANCELLED, "not started")
            self._after_task(task_id)
        self.s.pending = []
        if self._paged:  # rows never loaded: counted as cancelled (the run store lists what ran)
            self._tally[TASK_CANCELLED] += self._tally[TASK_PENDING]
            self._tally[TASK_PENDING] = 0
        if self.s.awaiting_landing:
            await self._wait_for_landings_after_cancel()
        if self._paged:
            waiting = list(self.s.awaiting_landing.values())
            self.s.awaiting_landing.clear()
            for task_id in waiting:
                self._after_task(task_id)
            await self._run_store.flush()

    # --- signals and the query: the workflow's public surface; the work is done by its parts -----

    @workflow.signal(name=SIGNAL_TASK_STAGE)
    def task_stage(self, *args: object) -> None:
        """From a task's activity or child workflow. Takes any input and never raises: a bad one
        is listed under `rejected` in `progress`; a stage of a task not running is dropped."""
        try:
            stage = parse_task_stage(args)
        except InvalidStage as err:
            self._refused.append(describe_refused(args, str(err)))
            workflow.logger.warning("refused a task_stage signal: %s", err)
            return
        except Exception as err:  # noqa: BLE001 - an escaping exception would wedge the workflow
            self._refused.append(describe_refused((), f"unreadable ({type(err).__name__})"))
            return
        self._on_stage(stage.task_id, stage.stage, stage.verdict)

    @workflow.signal(name=SIGNAL_GIT_OPS_LANDED)
    def git_ops_landed(self, message: GitOpsLanded) -> None:
        """From the clone's git batcher (workflows/orchestrator_landing.py)."""
        self._receive_git_ops_landed(message)
        self._refresh_details()

    @workflow.signal(name=SIGNAL_QUEUE_OUTCOMES)
    def queue_outcomes(self, message: QueueOutcomes) -> None:
        """From the merge queue of a `land = "queue"` board (workflows/queue_landing.py)."""
        self._receive_queue_outcomes(message)
        self._refresh_details()

    @workflow.query(name=QUERY_PROGRESS)
    def progress(self) -> OrchestratorProgress:
        """Counts by state (and landed), running tasks, and every task's status (a paged run: the
        tasks in flight and the last few finished; the run store has every finished one)."""
        return self._progress()
