"""Every type that crosses the wire (workflow inputs, signals, updates, queries, activity I/O).

Kept in one module, as plain dataclasses with defaults, so a field can be added later without
breaking a caller that sends an older shape, and so `temporal` CLI users can read them as JSON.
"""

# No `from __future__ import annotations` here: the data converter resolves these hints on every
# payload, and real (not string) annotations make that several times cheaper on the hot path.
from dataclasses import dataclass, field
from typing import Any, Optional

# Names users type into the `temporal` CLI; they are the public interface.
DEFAULT_TASK_QUEUE = "taskfleet"

GIT_BATCH_WORKFLOW = "GitBatchWorkflow"
SIGNAL_ENQUEUE = "enqueue"
SIGNAL_FLUSH = "flush"
UPDATE_SUBMIT = "submit"
UPDATE_FLUSH_NOW = "flush_now"
UPDATE_RETRY = "retry"
QUERY_STATUS = "status"
SIGNAL_GIT_OPS_LANDED = "git_ops_landed"

OP_TYPES = ("commit", "push", "merge")

# Batch statuses (the seed's plain names).
BATCH_PENDING = "pending"
BATCH_EXECUTING = "executing"
BATCH_COMPLETED = "completed"
BATCH_FAILED = "failed"

# Per-op outcomes.
OUTCOME_LANDED = "landed"
OUTCOME_UP_TO_DATE = "up_to_date"
OUTCOME_FAILED = "failed"


# --- smoke workflow (the foundation's demo) ---------------------------------------------------


@dataclass
class SmokeInput:
    name: str = "taskfleet"


@dataclass
class SmokeResult:
    greeting: str
    worker_pid: int


# --- git batching ----------------------------------------------------------------------------


@dataclass
class GitOp:
    """One git operation queued on a `GitBatchWorkflow`.

    commit: stage `files` (all changes when empty) in `worktree` and commit on `branch`.
    merge: merge `branch` into `target` (default: the remote's default branch).
    push: push `branch` as it is.
    """

    op_type: str
    branch: str
    id: str = ""
    message: str = ""
    files: list[str] = field(default_factory=list)
    worktree: str = ""
    target: str = ""
    reply_to: str = ""
    # push: replace the remote branch even when it moved elsewhere, if it is still where this
    # clone last saw it (--force-with-lease). For branches taskfleet owns, such as task branches.
    force: bool = False
    # Set by the workflow when the op is accepted (ISO-8601, workflow time).
    enqueued_at: str = ""


@dataclass
class GitBatchConfig:
    """Start input of `GitBatchWorkflow`."""

    repo: str
    remote: str = "origin"
    max_batch_size: int = 10
    max_batch_age_seconds: float = 5.0
    atomic: bool = False
    # How long a push may go without a heartbeat before the server retries it on another worker.
    heartbeat_timeout_seconds: float = 30.0
    # Test hook: continue-as-new once history passes this many events (0 = server's suggestion only).
    max_history_events: int = 0


@dataclass
class RejectedOp:
    op: Any
    reason: str
    at: str = ""


@dataclass
class OpOutcome:
    op_id: str
    op_type: str
    branch: str
    status: str  # landed | up_to_date | failed
    reason: str = ""
    commit: str = ""
    ref: str = ""


@dataclass
class GitBatch:
    id: str
    ops: list[GitOp]
    status: str = BATCH_PENDING
    created_at: str = ""
    executed_at: str = ""
    error: str = ""
    attempts: int = 0
    outcomes: list[OpOutcome] = field(default_factory=list)
    execute_seconds: float = 0.0


@dataclass
class BatchResult:
    """What `flush_now` and `retry` return: the fate of the batch(es) that call cut.

    `status` is `completed` when every batch completed, `failed` when one failed, `empty` when there
    was nothing to flush.
    """

    batch_id: str
    status: str
    outcomes: list[OpOutcome] = field(default_factory=list)
    error: str = ""
    batch_ids: list[str] = field(default_factory=list)


@dataclass
class GitBatchStats:
    total_ops: int = 0
    total_batches: int = 0
    avg_ops_per_batch: float = 0.0
    pushes: int = 0
    network_savings: int = 0
    total_execute_seconds: float = 0.0
    landed_ops: int = 0
    failed_ops: int = 0
    rejected_ops: int = 0


@dataclass
class GitBatchStatus:
    """Answer of the `status` query."""

    queue: list[GitOp]
    pending_batches: list[GitBatch]
    executed_batches: list[GitBatch]
    failed_batches: list[GitBatch]
    rejected: list[RejectedOp]
    config: GitBatchConfig
    stats: GitBatchStats
    executing: Optional[GitBatch] = None
    # How many runs this workflow id has had (1 + continue-as-new count).
    runs: int = 1


@dataclass
class GitOpsLanded:
    """Signal `git_ops_landed`, sent to each op's `reply_to` after its batch ran."""

    batch_id: str
    repo: str
    remote: str
    outcomes: list[OpOutcome]


@dataclass
class PushBatchInput:
    """Input of the `push_batch` activity: apply the ops in order, then one `git push`."""

    batch_id: str
    repo: str
    remote: str
    ops: list[GitOp]
    atomic: bool = False
    # The workflow's attempt at this batch (a failed batch is run again on a later flush).
    attempt: int = 1


@dataclass
class PushBatchOutput:
    batch_id: str
    outcomes: list[OpOutcome]
    pushed_refs: list[str]
    pushes: int
    seconds: float


@dataclass
class GitBatchState:
    """Everything a `GitBatchWorkflow` carries across continue-as-new: nothing accepted is dropped."""

    queue: list[GitOp] = field(default_factory=list)
    pending_batches: list[GitBatch] = field(default_factory=list)
    failed_batches: list[GitBatch] = field(default_factory=list)
    executed_batches: list[GitBatch] = field(default_factory=list)
    rejected: list[RejectedOp] = field(default_factory=list)
    stats: GitBatchStats = field(default_factory=GitBatchStats)
    recent_ids: list[str] = field(default_factory=list)
    next_batch: int = 1
    next_op: int = 1
    flush_requested: bool = False
    runs: int = 1


# --- lessons (past failures) -------------------------------------------------------------------


@dataclass
class Lesson:
    """One past failure and what resolved it; one line of the lessons JSONL file."""

    id: str = ""
    task_type: str = ""
    activity_type: str = ""
    failure_type: str = ""  # verify_failed, exec_failed, timeout, ...
    failure_msg: str = ""
    resolution: str = ""
    pattern: str = ""  # normalized failure_msg: numbers, hashes and temp paths stripped
    times_seen: int = 1
    first_seen: str = ""  # ISO-8601
    last_seen: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class LessonQuery:
    """Input of `query_lessons`: every field given must match (AND); `similar_to` ranks by BM25."""

    task_type: str = ""
    activity_type: str = ""
    failure_type: str = ""
    pattern: str = ""
    similar_to: str = ""
    seen_after: str = ""  # ISO-8601, inclusive
    seen_before: str = ""
    most_frequent: bool = False
    limit: int = 20


@dataclass
class LessonMatch:
    lesson: Lesson
    score: float = 0.0


@dataclass
class LessonsStats:
    lessons: int = 0
    lines_read: int = 0
    malformed_lines: int = 0
    malformed_line_numbers: list[int] = field(default_factory=list)  # the first few, to fix by hand
    path: str = ""
    build_seconds: float = 0.0
    task_types: int = 0
    tokens: int = 0


@dataclass
class LessonsAnswer:
    """Result of `LessonsQueryWorkflow` (what `taskfleet lessons query|stats` prints)."""

    stats: LessonsStats
    matches: list[LessonMatch] = field(default_factory=list)


# --- boards and the orchestrator ---------------------------------------------------------------

ORCHESTRATOR_WORKFLOW = "OrchestratorWorkflow"
TASK_SUCCEEDED = "succeeded"
TASK_FAILED = "failed"
TASK_CANCELLED = "cancelled"
TASK_PENDING = "pending"
TASK_RUNNING = "running"


@dataclass
class TaskSpec:
    """One row of a board, with the board's defaults already applied."""

    id: str
    scope: str = ""
    branch: str = ""
    run: str = ""  # executor command line, run with `sh -c` in the task's worktree
    verify: str = ""  # verification command; its exit code decides
    template: str = "implementer.j2"  # a template name, or inline template text
    task_type: str = ""
    activity_type: str = "implement"
    acceptance: str = ""  # the markdown board's Verification column, when it is prose
    timeout_seconds: float = 600.0
    refresh: bool = False  # bypass the result cache
    done: bool = False  # `[x]` on a markdown board: not dispatched
    # false: a task that changes nothing (a check, a report) runs in a scratch folder, with no
    # worktree, commit or landing
    worktree: bool = True


@dataclass
class Board:
    tasks: list[TaskSpec]
    name: str = "board"
    base: str = "main"
    max_parallel: int = 4
    land: str = "push"  # push: push each task branch; merge: merge it into `base`
    path: str = ""
    format: str = "toml"


@dataclass
class TaskOutcome:
    """What the orchestrator keeps per task (and carries across continue-as-new): no bulk output."""

    id: str
    status: str = TASK_PENDING
    landed: bool = False
    commit: str = ""
    seconds: float = 0.0
    reason: str = ""
    cache_hit: bool = False
    log_path: str = ""


@dataclass
class OrchestratorStats:
    wall_seconds: float = 0.0
    task_seconds: float = 0.0
    speedup: float = 0.0
    pushes: int = 0
    network_savings: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    runs: int = 1
    largest_history_length: int = 0
    max_running: int = 0


@dataclass
class OrchestratorState:
    """Carried across continue-as-new: what is not done yet, compact outcomes and counters."""

    pending: list[str] = field(default_factory=list)
    outcomes: dict[str, TaskOutcome] = field(default_factory=dict)
    awaiting_landing: dict[str, str] = field(default_factory=dict)  # landing op id -> task id
    landed_batches: list[str] = field(default_factory=list)
    stats: OrchestratorStats = field(default_factory=OrchestratorStats)
    started_at: str = ""
    flush_sent: bool = False


@dataclass
class OrchestratorInput:
    board: Board
    repo: str
    remote: str = "origin"
    max_parallel: int = 0  # 0: the board's
    git_task_queue: str = ""  # where the GitBatchWorkflow runs (default: this workflow's queue)
    git_max_batch_size: int = 10
    git_max_batch_age_seconds: float = 5.0
    land_timeout_seconds: float = 300.0
    heartbeat_timeout_seconds: float = 30.0
    max_history_events: int = 0  # test hook: continue-as-new past this many events
    state: Optional[OrchestratorState] = None


@dataclass
class TaskInput:
    """Input of `run_task`."""

    task: TaskSpec
    repo: str
    remote: str
    base: str
    land: str
    run_key: str  # the orchestrator's workflow id: commit trailer and landing op ids
    reply_to: str
    git_task_queue: str
    git_max_batch_size: int = 10
    git_max_batch_age_seconds: float = 5.0


@dataclass
class TaskResult:
    """Summary of one task (never bulk output: the log file holds that)."""

    id: str
    status: str
    reason: str = ""
    failure_type: str = ""
    exec_exit_code: Optional[int] = None
    verify_exit_code: Optional[int] = None
    exec_seconds: float = 0.0
    verify_seconds: float = 0.0
    seconds: float = 0.0
    commit: str = ""
    log_path: str = ""
    output_tail: str = ""
    cache_hit: bool = False
    resumed: bool = False  # a retry found the task's commit already on its branch
    landing_op_id: str = ""
    prompt_hash: str = ""


@dataclass
class OrchestratorResult:
    tasks: list[TaskOutcome]
    stats: OrchestratorStats


@dataclass
class TaskProgress:
    id: str
    status: str
    landed: bool = False


@dataclass
class OrchestratorProgress:
    counts: dict[str, int]
    running: list[str]
    tasks: list[TaskProgress]
    pushes: int = 0
