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
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import asdict, replace
from datetime import datetime, timedelta
from typing import Optional

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, ChildWorkflowError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.board_rows import check_board_settings
    from taskfleet.core.boards import BoardError, validate_board
    from taskfleet.core.errors import cause_message, root_cause_message
    from taskfleet.core.ids import git_batch_workflow_id, landing_op_id, task_of_landing_op
    from taskfleet.core.models.board_store import (
        PAGE_MAX_BYTES,
        RECORD_BATCH_OUTCOMES,
        REASON_MAX_CHARS,
        RESULT_MAX_TASKS,
        BoardPage,
        BoardPageRequest,
        OutcomeBatch,
        OutcomePage,
        ReadOutcomesRequest,
        RecordedBatch,
        StoreBoardInput,
    )
    from taskfleet.core.models.git_batch import OUTCOME_FAILED, GitOpsLanded, OpOutcome
    from taskfleet.core.models.orchestrator import (
        TASK_CANCELLED,
        TASK_FAILED,
        TASK_PENDING,
        TASK_RUNNING,
        TASK_SUCCEEDED,
        BranchClaim,
        OrchestratorInput,
        TaskEnvCheck,
        OrchestratorProgress,
        OrchestratorResult,
        OrchestratorState,
        TaskInput,
        TaskOutcome,
        TaskProgress,
        TaskResult,
        TaskSpec,
    )
    from taskfleet.core.models.paging import FAILED_IDS_CAP, BoardReference, PagingState
    from taskfleet.core.models.task_group import GROUP_MAX_TASKS, TaskGroupInput, TaskGroupResult
    from taskfleet.core.models.merge_queue import DefaultBranchInput, EntryOutcome, QueueOutcomes
    from taskfleet.core.names import (
        ACTIVITY_CHECK_TASK_ENV,
        ACTIVITY_CLAIM_BRANCHES,
        ACTIVITY_DEFAULT_BRANCH,
        ACTIVITY_LOAD_BOARD_PAGE,
        ACTIVITY_READ_OUTCOMES,
        ACTIVITY_RECORD_OUTCOMES,
        ACTIVITY_RUN_TASK,
        ACTIVITY_RUN_TASK_GROUP,
        ACTIVITY_STORE_BOARD,
        ORCHESTRATOR_WORKFLOW,
        PATCH_BOARD_PAGES,
        PATCH_CLAIM_BRANCHES,
        PATCH_DEFAULT_BASE,
        PATCH_LOCAL_RECORD,
        PATCH_RESULT_FROM_MEMORY,
        PATCH_RUN_KEY_FIRST_RUN,
        PATCH_TASK_ENV_CHECK,
        QUERY_PROGRESS,
        SIGNAL_FLUSH,
        SIGNAL_GIT_OPS_LANDED,
        SIGNAL_QUEUE_OUTCOMES,
        SIGNAL_TASK_STAGE,
    )
    from taskfleet.core.judge_board_keys import has_judge
    from taskfleet.core.models.review import STAGE_IMPLEMENTING, STAGE_LANDING
    from taskfleet.core.store_refs import run_ref
    from taskfleet.core.task_stage import InvalidStage, describe_refused, parse_task_stage

from taskfleet.workflows.activity_names import activity_name
from taskfleet.workflows.judged_task import run_judged_task
from taskfleet.workflows.llm_dispatch import ANTHROPIC, add_judge_usage, add_llm_usage, run_llm_task
from taskfleet.workflows.queue_landing import QueueLandingMixin

TASK_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=20),
    maximum_attempts=3,
    non_retryable_error_types=["BadTaskSetup", "TemplateError"],
)
CLAIM_RETRY = RetryPolicy(maximum_attempts=5, non_retryable_error_types=["BranchesHeld"])
ENV_CHECK_RETRY = RetryPolicy(maximum_attempts=5, non_retryable_error_types=["EnvNotAllowed"])
# After a cancel: how long to wait for landing outcomes of ops already sent (they land anyway).
CANCEL_LANDING_WAIT = timedelta(seconds=60)
# The board store and the run store are the clone: a lock or a busy disk clears, so retry them
# without a limit (outcomes are never dropped); a board that is not there never appears.
STORE_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=30), non_retryable_error_types=["BoardStoreError"])
# A board started by hand with inline JSON: up to this much (its tasks then move to the clone).
INLINE_BOARD_MAX_BYTES = 256 * 1024
RECORD_BATCH_BYTES = 128 * 1024  # of outcomes per append to the run store (estimated)
BACKLOG_OUTCOMES = 4 * RECORD_BATCH_OUTCOMES  # dispatch waits while more are not yet recorded
RECENT_FINISHED = 20  # finished tasks `progress` shows for a paged run
RECENT_PUSHES = 64  # landed batch ids a paged run remembers (to count a push once)
QUEUE_QUIET_SECONDS = 1800.0  # land = "queue": the least time without news before landing times out
PREFETCH_BELOW = 200  # tasks left to start from the loaded pages when the next page is asked for
GROUP_MAX_BYTES = 96 * 1024  # of task specs in one group's input
RECENT_REFUSED = 10  # refused `task_stage` signals `progress` lists


def landed_commit(outcome: OpOutcome) -> str:
    """The commit of the op's branch that landed: `branch_commit` (C1); a batcher that predates
    it reports a push's branch commit in `commit`."""
    return outcome.branch_commit or (outcome.commit if outcome.op_type == "push" else "")


def _batcher_id(repo: str, remote: str, task_queue: str) -> str:
    """The batcher of this clone and remote on this run's task queue: the workers that serve the run
    serve its pushes too."""
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
class OrchestratorWorkflow(QueueLandingMixin):
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
        self._early_queue: dict[str, EntryOutcome] = {}  # the same from a merge queue, by entry id
        self._queue_news = 0  # queue outcomes received: a wait for landings that sees news goes on
        # Counts by state, kept as statuses change: the UI details and `progress` stay O(1) per
        # event instead of a walk over every task of a 2,000-task board.
        self._tally = {name: 0 for name in (TASK_PENDING, TASK_RUNNING, TASK_SUCCEEDED, TASK_FAILED, TASK_CANCELLED)}
        self._tally["landed"] = 0
        # Paged runs (boards by reference): the tally travels in the state, since outcomes do not.
        self._rows: dict[str, int] = {}  # task id -> its row on the board (tasks loaded, not finished)
        self._unrecorded: list[tuple[TaskOutcome, int]] = []  # finished, not yet in the run store
        self._mine: list[tuple[TaskOutcome, int]] = []  # what this run recorded, while few (its result)
        self._unrecorded_bytes = 0
        self._recorder: Optional[asyncio.Task] = None
        self._loader: Optional[asyncio.Task] = None  # the next page, being loaded
        self._recent: deque[TaskProgress] = deque(maxlen=RECENT_FINISHED)
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

    @property
    def _paged(self) -> bool:
        return self.s.paging is not None

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
            await self._check_task_env()
            if not params.board.base:
                await self._resolve_base()
            if not self.s.run_key:
                info = workflow.info()
                # Keyed by the first run id: a later run with the same workflow id (`run --id X`
                # again) never resumes this run's commits nor repeats its landing op ids.
                self.s.run_key = (
                    f"{info.workflow_id}@{info.first_execution_run_id}"
                    if workflow.patched(PATCH_RUN_KEY_FIRST_RUN) else info.workflow_id
                )
            if params.board_ref is not None or workflow.patched(PATCH_BOARD_PAGES):
                await self._start_paging()  # branches are claimed a page at a time
            elif workflow.patched(PATCH_CLAIM_BRANCHES):
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
            while True:
                await (self._dispatch_pages() if self._paged else self._dispatch())
                if self._draining:
                    return await self._continue_as_new()
                await self._await_landing()
                if not self.s.pending:
                    break  # tasks the merge queue sent back go round again (only land = "queue")
            if self._paged:
                await self._flush_outcomes()
                return self._result(await self._small_run_outcomes())
        except asyncio.CancelledError:
            await self._cancel_everything()
            raise
        return self._result(list(self.s.outcomes.values()))

    async def _resolve_base(self) -> None:
        """A board that names no base lands on the remote's default branch, asked of the clone (runs
        started before this took "main", as the board's default was then)."""
        board = self.params.board
        if not workflow.patched(PATCH_DEFAULT_BASE):
            board.base = "main"
            return
        try:
            board.base = await workflow.execute_activity(
                ACTIVITY_DEFAULT_BRANCH, DefaultBranchInput(repo=self.params.repo, remote=self.params.remote),
                result_type=str, start_to_close_timeout=timedelta(seconds=120), retry_policy=CLAIM_RETRY,
                summary=f"default branch of {self.params.remote}",
            )
        except ActivityError as err:
            raise ApplicationError(f"board refused: {root_cause_message(err)}", type="BoardError",
                                   non_retryable=True) from None
        try:
            check_board_settings(board, "OrchestratorWorkflow input")
        except BoardError as err:
            raise ApplicationError(f"board refused: {err}", type="BoardError", non_retryable=True) from None
    async def _check_task_env(self) -> None:
        """A board may only ask for worker variables the worker's operator lets tasks see: the
        worker knows its allow-list (the CLI does not), so it is asked before anything starts."""
        params = self.params
        names = {n for t in params.board.tasks if not t.done for n in t.env}
        if params.board_ref is not None:
            names.update(params.board_ref.env)
        if params.first_page is not None:
            names.update(n for t in params.first_page.tasks for n in t.env)
        if not names or not workflow.patched(PATCH_TASK_ENV_CHECK):
            return
        try:
            await workflow.execute_activity(
                ACTIVITY_CHECK_TASK_ENV, TaskEnvCheck(names=sorted(names)),
                start_to_close_timeout=timedelta(seconds=30), retry_policy=ENV_CHECK_RETRY,
                summary=f"check env {', '.join(sorted(names))}"[:200],
            )
        except ActivityError as err:
            raise ApplicationError(f"board refused: {cause_message(err)}", type="EnvNotAllowed",
                                   non_retryable=True) from None

    async def _claim_branches(self) -> None:
        """Refuse to start when another running run holds some of this board's branches."""
        branches = [self.tasks[t].branch for t in self.s.pending if self.tasks[t].worktree]
        if not branches:
            return
        try:
            await self._claim(branches)
        except ActivityError as err:
            raise ApplicationError(
                f"board refused: {root_cause_message(err)}", type="BranchesHeld", non_retryable=True
            ) from None

    # --- boards by reference: pages in, outcomes out -------------------------------------------------

    async def _start_paging(self) -> None:
        """Become a paged run: the board's tasks live in the clone, outcomes in the run store."""
        params, info = self.params, workflow.info()
        reference = params.board_ref
        if reference is None:
            # Started with the tasks inline (by hand, or an older client): store them once, so that
            # continue-as-new never carries them.
            size = len(json.dumps(asdict(params.board)))
            if size > INLINE_BOARD_MAX_BYTES:
                raise ApplicationError(
                    f"board refused: an inline board may be at most {INLINE_BOARD_MAX_BYTES // 1024} KB of JSON, "
                    f"this one is {size // 1024} KB; store it in the clone and start with its reference "
                    f"(`taskfleet run` does; taskfleet.clients.board_store.store_board)",
                    type="BoardError", non_retryable=True,
                )
            try:
                reference = await workflow.execute_activity(
                    ACTIVITY_STORE_BOARD, StoreBoardInput(repo=params.repo, board=params.board),
                    result_type=BoardReference, start_to_close_timeout=timedelta(seconds=120),
                    retry_policy=STORE_RETRY, summary=f"store board {params.board.name} in the clone",
                )
            except ActivityError as err:
                raise ApplicationError(f"board refused: {root_cause_message(err)}", type="BoardError",
                                       non_retryable=True) from None
            self.params.board = replace(params.board, tasks=[])
        self.tasks.clear()
        self.s.pending, self.s.outcomes = [], {}
        self._tally.update({name: 0 for name in self._tally})
        self._tally[TASK_PENDING] = reference.open_tasks
        self.s.paging = PagingState(
            board=reference, run_ref=run_ref(info.workflow_id, info.first_execution_run_id), counts=self._tally
        )

    async def _dispatch_pages(self) -> None:
        """The sliding window over a stored board: the next page is loaded while the window still
        has tasks of the last one to start (so it never waits for a page), never more than that."""
        p = self.s.paging
        while True:
            if not self.s.pending:
                if self._loader is None:
                    if p.load_from >= p.board.tasks:
                        break
                    if self._started_here and self._should_continue_as_new():
                        self._draining = True
                        break
                    self._start_loader()
                await self._loader
                continue
            await workflow.wait_condition(
                lambda: len(self._running) < self.max_parallel and len(self._unrecorded) < BACKLOG_OUTCOMES
            )
            if self._started_here and self._should_continue_as_new():
                self._draining = True
                break
            free = self.max_parallel - len(self._running)
            group, size = [], 0
            while self.s.pending and len(group) < min(self._group_size(), free) and self._groupable(self.s.pending[0]):
                cost = len(json.dumps(vars(self.tasks[self.s.pending[0]])))
                if group and size + cost > GROUP_MAX_BYTES:
                    break  # the group's input stays one small payload
                group.append(self.tasks[self.s.pending.pop(0)])
                size += cost
            if len(group) > 1:
                handle = asyncio.create_task(self._run_group(group))
                for task in group:
                    self.s.outcomes[task.id] = TaskOutcome(id=task.id)
                    self._running[task.id] = handle
                p.group_runs += 1
            else:
                task = group[0] if group else self.tasks[self.s.pending.pop(0)]
                self.s.outcomes[task.id] = TaskOutcome(id=task.id)
                self._running[task.id] = asyncio.create_task(self._run_one(task))
            self._started_here += 1
            self.s.stats.max_running = max(self.s.stats.max_running, len(self._running))
            if len(self.s.pending) < PREFETCH_BELOW and self._loader is None and p.load_from < p.board.tasks:
                self._start_loader()
            self._refresh_details()
        await workflow.wait_condition(lambda: not self._running)

    def _start_loader(self) -> None:
        self._loader = asyncio.create_task(self._load_page())

    def _group_size(self) -> int:
        """Tasks per group: a quarter of the window (at least four groups in flight), at most 50."""
        return min(GROUP_MAX_TASKS, max(1, self.max_parallel // 4))

    def _groupable(self, task_id: str) -> bool:
        task = self.tasks[task_id]
        return not task.worktree and not getattr(task, "implementer", "")

    async def _load_page(self) -> None:
        p = self.s.paging
        page = self._take_first_page()
        if page is None:
            try:
                page = await workflow.execute_activity(
                    ACTIVITY_LOAD_BOARD_PAGE,
                    BoardPageRequest(repo=self.params.repo, board_id=p.board.board_id, start=p.load_from),
                    result_type=BoardPage, start_to_close_timeout=timedelta(seconds=120), retry_policy=STORE_RETRY,
                    summary=f"board rows {p.load_from}+",
                )
            except ActivityError as err:
                raise ApplicationError(
                    f"board {p.board.board_id[:12]} cannot be read from {self.params.repo}: {root_cause_message(err)}",
                    type="BoardStoreError", non_retryable=True,
                ) from None
        for refused in page.refused:
            if refused.index >= p.accounted:  # not counted yet (a resumed run reloads from its first pending row)
                self._tally[TASK_PENDING] -= 1
                self._tally[TASK_FAILED] += 1
                self._record(TaskOutcome(id=refused.id, status=TASK_FAILED, reason=refused.reason), refused.index)
        tasks = [(t, row) for t, row in zip(page.tasks, page.rows) if t.id not in self.tasks and t.id not in self.s.outcomes]
        held = await self._claim_page([t for t, _ in tasks if t.worktree], first=p.accounted == 0)
        for task, row in tasks:
            if task.branch in held:
                self._tally[TASK_PENDING] -= 1
                self._tally[TASK_FAILED] += 1
                self._record(TaskOutcome(id=task.id, status=TASK_FAILED, reason=held[task.branch]), row)
                continue
            self.tasks[task.id] = task
            self._rows[task.id] = row
            self.s.pending.append(task.id)
        p.accounted = max(p.accounted, page.next)
        p.load_from = page.next
        self._loader = None

    def _take_first_page(self) -> Optional[BoardPage]:
        """The first page the client read while storing the board (it came in the input), if this
        is where the run starts and the page holds up; it is used once, never carried on.

        It crossed the wire unchecked by any worker, so it is checked as an inline board is; one
        that does not hold up is dropped and the page loaded from the store (nothing is lost)."""
        page, self.params.first_page = self.params.first_page, None
        p = self.s.paging
        if page is None or p.load_from != 0 or p.accounted != 0:
            return None
        try:
            if page.start != 0 or not 0 < page.next <= p.board.tasks or page.total != p.board.tasks:
                raise BoardError(f"rows {page.start}..{page.next} of {page.total} do not fit the stored board")
            if page.board_id and page.board_id != p.board.board_id:
                raise BoardError(f"it was read from board {page.board_id[:12]}, not {p.board.board_id[:12]}")
            if len(page.rows) != len(page.tasks) or any(not 0 <= r < page.next for r in page.rows) \
                    or any(not 0 <= r.index < page.next for r in page.refused):
                raise BoardError("its rows do not match its tasks")
            # Every row of the range is exactly one of: a task, a refused row, a done row.
            rows = sorted(page.rows + [r.index for r in page.refused])
            if len(set(rows)) != len(rows) or page.rows != sorted(page.rows) or page.done < 0 \
                    or len(rows) + page.done != page.next - page.start or any(t.done for t in page.tasks):
                raise BoardError("its rows, refused rows and done rows do not add up to its range")
            if page.tasks:
                validate_board(replace(self.params.board, tasks=page.tasks), "first page")
        except BoardError as err:
            workflow.logger.warning("the first page in the input is not used (%s): loading it from the store", err)
            return None
        return page

    async def _claim(self, branches: list[str]) -> None:
        """The claim activity for these branches (ActivityError when another running run holds some)."""
        info = workflow.info()
        await workflow.execute_activity(
            ACTIVITY_CLAIM_BRANCHES,
            BranchClaim(self.params.repo, branches, info.workflow_id, info.first_execution_run_id),
            start_to_close_timeout=timedelta(seconds=120),
            heartbeat_timeout=timedelta(seconds=self.params.heartbeat_timeout_seconds),
            retry_policy=CLAIM_RETRY,
            summary=f"claim {len(branches)} task branch(es)",
        )

    async def _claim_page(self, tasks: list[TaskSpec], first: bool) -> dict[str, str]:
        """Claim a page's task branches (see `_claim_branches`); the branches another run holds,
        with the reason. On the first page that refuses the board, as an inline board is refused."""
        if not tasks:
            return {}
        branches = [t.branch for t in tasks]
        try:
            await self._claim(branches)
        except ActivityError as err:
            reason = root_cause_message(err)
            if first:
                raise ApplicationError(f"board refused: {reason}", type="BranchesHeld", non_retryable=True) from None
            return {branch: reason[:REASON_MAX_CHARS] for branch in branches}
        return {}

    async def _run_group(self, tasks: list[TaskSpec]) -> None:
        """Tasks without a worktree, several in one activity; each gets its own result."""
        outcomes = [self.s.outcomes[t.id] for t in tasks]
        for outcome in outcomes:
            self._set_status(outcome, TASK_RUNNING)
        summary = f"{len(tasks)} tasks: {tasks[0].id} .. {tasks[-1].id}"
        try:
            grouped: TaskGroupResult = await workflow.execute_activity(
                ACTIVITY_RUN_TASK_GROUP,
                # The template's own task is never run: a bare one keeps the payload to the tasks.
                TaskGroupInput(template=self._task_input(TaskSpec(id=tasks[0].id)), tasks=tasks),
                result_type=TaskGroupResult,
                start_to_close_timeout=timedelta(seconds=2 * max(t.timeout_seconds for t in tasks) + 120),
                heartbeat_timeout=timedelta(seconds=self.params.heartbeat_timeout_seconds),
                retry_policy=TASK_RETRY,
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=summary[:100],
            )
        except asyncio.CancelledError:
            for outcome in outcomes:
                self._set_status(outcome, TASK_CANCELLED, "cancelled")
        except ActivityError as err:
            cancelled = isinstance(err.cause, CancelledError)
            for outcome in outcomes:
                self._set_status(outcome, TASK_CANCELLED if cancelled else TASK_FAILED,
                                 "cancelled" if cancelled else root_cause_message(err))
            workflow.logger.warning("group %s: %s", summary, outcomes[0].reason)
        else:
            results = {r.id: r for r in grouped.results}
            for task, outcome in zip(tasks, outcomes):
                result = results.get(task.id) or TaskResult(id=task.id, status=TASK_FAILED, reason="its group returned no result")
                self._apply_result(task, outcome, result)
        finally:
            for task in tasks:
                self._running.pop(task.id, None)
                self._after_task(task.id)
            self._refresh_details()

    def _after_task(self, task_id: str) -> None:
        """A paged run records a task's outcome once it is final: finished, and landed or not."""
        if not self._paged or task_id in self._running or task_id not in self.s.outcomes:
            return
        if task_id in self.s.awaiting_landing.values() or self.s.outcomes[task_id].status == TASK_PENDING:
            return  # landing, or sent back by the merge queue to run again
        outcome = self.s.outcomes.pop(task_id)
        self.tasks.pop(task_id, None)
        self._record(outcome, self._rows.pop(task_id, -1))

    def _record(self, outcome: TaskOutcome, row: int) -> None:
        """Queue a final outcome for the run store (appended in batches by `_record_loop`)."""
        p = self.s.paging
        outcome.reason = outcome.reason[:REASON_MAX_CHARS]
        if outcome.status != TASK_SUCCEEDED and len(p.failed_ids) < FAILED_IDS_CAP:
            p.failed_ids.append(outcome.id)
        self._unrecorded.append((outcome, row))
        if self.s.stats.runs == 1 and len(self._mine) <= RESULT_MAX_TASKS:
            self._mine.append((outcome, row))
        self._unrecorded_bytes += 200 + len(outcome.id) + len(outcome.reason) + len(outcome.log_path) + len(outcome.commit)
        self._recent.append(TaskProgress(outcome.id, outcome.status, outcome.landed, outcome.reason,
                                         verdict=outcome.verdict))
        if len(self._unrecorded) >= RECORD_BATCH_OUTCOMES or self._unrecorded_bytes >= RECORD_BATCH_BYTES:
            self._start_recorder()

    def _start_recorder(self) -> None:
        if self._unrecorded and (self._recorder is None or self._recorder.done()):
            self._recorder = asyncio.create_task(self._record_loop())

    async def _record_loop(self) -> None:
        """Append queued outcomes to the run store, a batch at a time, one append in flight."""
        p = self.s.paging
        while self._unrecorded:
            batch, size = [], 0
            for outcome, row in self._unrecorded[:RECORD_BATCH_OUTCOMES]:
                cost = 200 + len(outcome.id) + len(outcome.reason) + len(outcome.log_path) + len(outcome.commit)
                if batch and size + cost > RECORD_BATCH_BYTES:
                    break
                batch.append((outcome, row))
                size += cost
            outcomes = OutcomeBatch(repo=self.params.repo, run_ref=p.run_ref, batch_id=str(p.batches),
                                    outcomes=[o for o, _ in batch], rows=[r for _, r in batch])
            # A local activity: the append (milliseconds, in-process git writes) runs on this worker
            # within the workflow task, with no round trip through the server; a run's last append
            # then completes with the run. Every worker of a board reaches the clone.
            execute = workflow.execute_local_activity if workflow.patched(PATCH_LOCAL_RECORD) else workflow.execute_activity
            await execute(
                ACTIVITY_RECORD_OUTCOMES, outcomes,
                result_type=RecordedBatch, start_to_close_timeout=timedelta(seconds=120), retry_policy=STORE_RETRY,
                summary=f"record {len(batch)} outcome(s)",
            )
            del self._unrecorded[: len(batch)]
            self._unrecorded_bytes = max(0, self._unrecorded_bytes - size)
            p.batches += 1
            p.recorded += len(batch)

    async def _flush_outcomes(self) -> None:
        """Every final outcome in the run store (before continue-as-new and before the result)."""
        while self._unrecorded or (self._recorder is not None and not self._recorder.done()):
            self._start_recorder()
            if self._recorder is not None:
                await self._recorder

    async def _small_run_outcomes(self) -> list[TaskOutcome]:
        """A small run's outcomes for its result, in board order; none for a big run. When this
        run recorded them all (it never continued as new), they are still here: no read back."""
        p = self.s.paging
        if p.recorded > RESULT_MAX_TASKS or not p.recorded:
            return []
        if len(self._mine) == p.recorded and workflow.patched(PATCH_RESULT_FROM_MEMORY):
            return [outcome for outcome, _ in sorted(self._mine, key=lambda kept: kept[1])]
        page: OutcomePage = await workflow.execute_activity(
            ACTIVITY_READ_OUTCOMES,
            ReadOutcomesRequest(repo=self.params.repo, run_ref=p.run_ref, max_bytes=PAGE_MAX_BYTES),
            result_type=OutcomePage, start_to_close_timeout=timedelta(seconds=120), retry_policy=STORE_RETRY,
            summary="read the run's outcomes",
        )
        return page.outcomes if page.complete else []

    async def _continue_paged(self) -> OrchestratorResult:
        """Continue as new with where the run is on its board: no tasks, no finished outcomes."""
        if self._loader is not None:
            await self._loader
        await self._flush_outcomes()
        p = self.s.paging
        requeued = self._carry_requeued()
        fresh = [t for t in self.s.pending if t not in requeued]
        if fresh:  # loaded, never started: the next run loads them again
            p.load_from = self._rows[fresh[0]]
        self.s.pending = requeued
        p.awaiting_rows = {task_id: self._rows.get(task_id, -1) for task_id in self.s.outcomes}
        self.s.stats.runs += 1
        workflow.logger.info("continuing as new from row %d of %d", p.load_from, p.board.tasks)
        workflow.continue_as_new(OrchestratorInput(**{
            **self.params.__dict__, "board": replace(self.params.board, tasks=[]), "board_ref": p.board, "state": self.s,
            "first_page": None,
        }))

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

    def _task_input(self, task: TaskSpec) -> TaskInput:
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
        return self._queue_input(task_input) if self._queued else task_input

    async def _run_one(self, task: TaskSpec) -> None:
        outcome = self.s.outcomes[task.id]
        self._set_status(outcome, TASK_RUNNING)
        try:
            task_input = self._task_input(task)
            self._stages[task.id] = STAGE_IMPLEMENTING
            if task.implementer == ANTHROPIC:  # the built-in Claude implementer runs as a child workflow
                result = await run_llm_task(task_input, _summary(task))
            elif has_judge(task):  # rounds of run_task and the judge, then landing
                result = await run_judged_task(task_input, _summary(task), TASK_RETRY,
                                               self.params.heartbeat_timeout_seconds,
                                               lambda stage, verdict: self._on_stage(task.id, stage, verdict))
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
            self._apply_result(task, outcome, result)
        finally:
            self._running.pop(task.id, None)
            self._stages.pop(task.id, None)
            self._after_task(task.id)
            self._refresh_details()

    def _on_stage(self, task_id: str, stage: str, verdict: str = "") -> None:
        """A running task moved on (its own steps said so); its last verdict goes on its outcome."""
        if task_id not in self._running:
            return
        self._stages[task_id] = stage
        outcome = self.s.outcomes.get(task_id)
        if outcome is not None and verdict:
            outcome.verdict = verdict
        self._refresh_details()

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

    def _stage_of(self, task_id: str, status: str) -> str:
        if task_id in self._running:
            return self._stages.get(task_id, STAGE_IMPLEMENTING)
        if status == TASK_SUCCEEDED and task_id in self.s.awaiting_landing.values():
            return STAGE_LANDING
        return ""

    def _progress_of(self, t: TaskOutcome) -> TaskProgress:
        return TaskProgress(t.id, t.status, t.landed, t.reason, self._stage_of(t.id, t.status), t.verdict)

    def _apply_result(self, task: TaskSpec, outcome: TaskOutcome, result: TaskResult) -> None:
        self._set_status(outcome, result.status)
        outcome.commit, outcome.seconds, outcome.reason = result.commit, result.seconds, result.reason
        outcome.cache_hit, outcome.log_path = result.cache_hit, result.log_path
        stats = self.s.stats
        stats.task_seconds += result.seconds
        stats.work_seconds += (result.exec_seconds or 0.0) + (result.verify_seconds or 0.0)
        stats.setup_seconds += result.setup_seconds
        stats.wait_seconds += result.wait_seconds
        add_llm_usage(self.s, outcome, result)
        add_judge_usage(self.s, outcome, result)
        if result.status == TASK_SUCCEEDED:
            self.s.stats.cache_hits += int(result.cache_hit)
            self.s.stats.cache_misses += int(not result.cache_hit and not result.resumed)
            if result.landing_op_id and not outcome.landed:
                self._expect_landing(task.id, result)

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
            # Ops already sent land anyway (a push may be in flight): wait, bounded, for their
            # outcomes so that what the run reports as landed is what the remote holds.
            await self._ask_to_flush()
            try:
                await workflow.wait_condition(
                    lambda: not self.s.awaiting_landing, timeout=CANCEL_LANDING_WAIT,
                    timeout_summary="cancelled: wait for pushes already sent",
                )
            except asyncio.TimeoutError:
                for task_id in self.s.awaiting_landing.values():
                    self.s.outcomes[task_id].reason = "cancelled before its landing was reported"
        if self._paged:
            waiting = list(self.s.awaiting_landing.values())
            self.s.awaiting_landing.clear()
            for task_id in waiting:
                self._after_task(task_id)
            await self._flush_outcomes()

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
        self._take_early_queue_outcome(op_id)

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

    @workflow.signal(name=SIGNAL_QUEUE_OUTCOMES)
    def queue_outcomes(self, message: QueueOutcomes) -> None:
        """From the merge queue of a `land = "queue"` board (workflows/queue_landing.py)."""
        self._receive_queue_outcomes(message)
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
        self._forget_old_pushes()
        self._after_task(task_id)

    def _forget_old_pushes(self) -> None:
        if self._paged and len(self.s.landed_batches) > RECENT_PUSHES:
            # Counted, then forgotten: landings of one batch arrive together, so the last few ids
            # are enough to count each push once.
            del self.s.landed_batches[0]
            self.s.paging.pushes_forgotten += 1

    def _landing_workflow_id(self) -> str:
        """Where this run's landings go: the clone's git batcher, or the target's merge queue."""
        return self._queue_workflow_id() if self._queued else self.git_workflow_id

    async def _ask_to_flush(self) -> None:
        target = self._landing_workflow_id()
        try:
            await workflow.get_external_workflow_handle(target).signal(SIGNAL_FLUSH)
        except Exception as err:  # noqa: BLE001 - the age flush still lands them
            workflow.logger.warning("could not ask %s to flush: %s", target, err)

    async def _await_landing(self) -> None:
        """Wait (bounded) until every landing op this run sent has been reported."""
        if self.s.awaiting_landing and not self.s.flush_sent:
            # Every task has finished: land what is queued now rather than at the batch's age.
            self.s.flush_sent = True
            await self._ask_to_flush()
        # Through a merge queue, the timeout is a time without news from it (its verifies may take
        # long, but each batch it finishes answers some entries), at least its verify timeout.
        timeout = max(self.params.land_timeout_seconds, QUEUE_QUIET_SECONDS) if self._queued \
            else self.params.land_timeout_seconds
        while True:
            news = self._queue_news
            try:
                await workflow.wait_condition(
                    lambda: not self.s.awaiting_landing or bool(self.s.pending), timeout=timedelta(seconds=timeout),
                    timeout_summary=f"land timeout: give up waiting for pushes after {timeout:g}s",
                )
            except asyncio.TimeoutError:
                if self._queue_news != news:
                    continue  # the merge queue is still answering: wait on
                expired = list(self.s.awaiting_landing.values())
                for task_id in expired:
                    outcome = self.s.outcomes[task_id]
                    outcome.reason = f"not landed within {timeout:g}s" + (f" ({outcome.reason})" if outcome.reason else "")
                self.s.awaiting_landing.clear()
                for task_id in expired:
                    self._after_task(task_id)
            break
        if self.s.pending:
            return  # tasks sent back by the merge queue run again first
        await workflow.wait_condition(workflow.all_handlers_finished)

    # --- continue-as-new, results, queries ---------------------------------------------------------

    async def _continue_as_new(self) -> OrchestratorResult:
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self._paged:
            return await self._continue_paged()
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
            OrchestratorInput(**{**self.params.__dict__, "board": board, "state": self.s, "first_page": None})
        )

    def _result(self, tasks: list[TaskOutcome]) -> OrchestratorResult:
        stats = self.s.stats
        started = datetime.fromisoformat(self.s.started_at)
        stats.wall_seconds = round((workflow.now() - started).total_seconds(), 3)
        # Speed-up over the tasks' own work (executor + verification), not over time spent waiting
        # for taskfleet: that is reported per task beside it.
        stats.speedup = round(stats.work_seconds / stats.wall_seconds, 2) if stats.wall_seconds else 0.0
        done = self._tally[TASK_SUCCEEDED] + self._tally[TASK_FAILED]
        if done:
            own = max(stats.task_seconds - stats.work_seconds, 0.0) + stats.wait_seconds + stats.landing_seconds
            stats.overhead_seconds_per_task = round(own / done, 4)
        stats.pushes = self._pushes()
        stats.network_savings = max(self._tally["landed"] - stats.pushes, 0)
        stats.largest_history_length = max(stats.largest_history_length, workflow.info().get_current_history_length())
        p = self.s.paging
        if p is None:
            return OrchestratorResult(tasks=tasks, stats=stats)
        return OrchestratorResult(tasks=tasks, stats=stats, run_ref=p.run_ref, repo=self.params.repo,
                                  recorded=p.recorded, counts=dict(self._tally), failed_ids=list(p.failed_ids))

    def _pushes(self) -> int:
        forgotten = self.s.paging.pushes_forgotten if self.s.paging else 0
        return len(self.s.landed_batches) + forgotten

    def _counts(self) -> dict[str, int]:
        return dict(self._tally)

    @workflow.query(name=QUERY_PROGRESS)
    def progress(self) -> OrchestratorProgress:
        """Counts by state (and landed), running tasks, and every task's status (a paged run: the
        tasks in flight and the last few finished; the run store has every finished one)."""
        p = self.s.paging
        if p is not None:
            return OrchestratorProgress(
                counts=self._counts(),
                running=list(self._running),
                tasks=[self._progress_of(t) for t in self.s.outcomes.values()] + list(self._recent),
                pushes=self._pushes(),
                run_ref=p.run_ref,
                repo=self.params.repo,
                total=p.board.open_tasks,
                failed_ids=list(p.failed_ids),
                rejected=list(self._refused),
            )
        return OrchestratorProgress(
            counts=self._counts(),
            running=list(self._running),
            tasks=[self._progress_of(t) for t in self.s.outcomes.values()],
            pushes=len(self.s.landed_batches),
            rejected=list(self._refused),
        )

    def _refresh_details(self) -> None:
        c = self._counts()
        running = [f"{t} ({self._stages[t]})" if t in self._stages else t for t in list(self._running)[:10]]
        st = self.s.stats
        judged = st.judge_approved + st.judge_revised + st.judge_rejected
        workflow.set_current_details(
            f"**{self.params.board.name}** on `{self.params.repo}`\n\n"
            f"- pending {c[TASK_PENDING]}, running {c[TASK_RUNNING]} (max {self.max_parallel})\n"
            f"- succeeded {c[TASK_SUCCEEDED]}, failed {c[TASK_FAILED]}, cancelled {c[TASK_CANCELLED]}\n"
            f"- landed {c['landed']} in {self._pushes()} push(es)\n"
            + (f"- running: {', '.join(running)}\n" if running else "")
            + (self._queue_details() if self._queued else "")
            + (f"- judge: approve {st.judge_approved}, revise {st.judge_revised}, reject {st.judge_rejected}\n"
               if judged else "")
        )
