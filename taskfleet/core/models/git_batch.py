"""Wire types of git batching: ops, batches, outcomes, `GitBatchWorkflow` state and queries. Plain
dataclasses with defaults: a field can be added without breaking older callers."""

# No `from __future__ import annotations`: the data converter resolves these hints on every payload.
from dataclasses import dataclass, field
from typing import Any, Optional

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
@dataclass
class GitOp:
    """One git op: commit (`files`, or all changes, in `worktree` on `branch`), merge (`branch` into
    `target`, default the remote's default branch) or push (`branch` as it is)."""

    op_type: str
    branch: str
    id: str = ""
    message: str = ""
    files: list[str] = field(default_factory=list)
    worktree: str = ""
    target: str = ""
    reply_to: str = ""
    # push: --force-with-lease (replace the remote branch if it is where this clone last saw it),
    # for branches taskfleet owns such as task branches.
    force: bool = False
    # push/merge: the commit `branch` must be at when the batch applies, else this op alone fails (a
    # branch moved since its task committed never lands). Empty: no check.
    expect_commit: str = ""
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
    # Test hook: continue-as-new past this many events (0: the server's suggestion only).
    max_history_events: int = 0


@dataclass
class RejectedOp:
    """A message the batcher refused; `op` is a bounded preview, never the raw payload."""

    op: Any
    reason: str
    at: str = ""
    # Which handler refused it (enqueue, submit, retry...).
    handler: str = ""

    @classmethod
    def refused(cls, handler: str, what: Any, reason: str, at: str) -> "RejectedOp":
        """As `long_lived.refuse` builds a refusal (handler, preview, reason, time)."""
        return cls(op=what, reason=reason, at=at, handler=handler)


@dataclass
class OpOutcome:
    op_id: str
    op_type: str
    branch: str
    status: str  # landed | up_to_date | failed
    reason: str = ""
    commit: str = ""
    ref: str = ""
    # The commit of `branch` that landed (push/commit: the remote ref's value; merge: the merged
    # branch's tip, the target's being `commit`); empty when the op failed.
    branch_commit: str = ""


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
    """What `flush_now` and `retry` return: `status` completed, failed (a batch failed) or empty."""

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


def outcomes_by_listener(ops: list[GitOp], outcomes: list[OpOutcome]) -> dict[str, list[OpOutcome]]:
    """Outcomes by their ops' `reply_to` (none: left out): one signal per listener."""
    reply_to = {op.id: op.reply_to for op in ops}
    by_listener: dict[str, list[OpOutcome]] = {}
    for outcome in outcomes:
        listener = reply_to.get(outcome.op_id)
        if listener:
            by_listener.setdefault(listener, []).append(outcome)
    return by_listener


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
    # Signal `git_ops_landed` to the ops' `reply_to` workflows from the activity, once pushed.
    notify: bool = False


@dataclass
class PushBatchOutput:
    batch_id: str
    outcomes: list[OpOutcome]
    pushed_refs: list[str]
    pushes: int
    seconds: float
    # The `reply_to` workflows the activity told (with `notify`); the batcher tells the others.
    notified: list[str] = field(default_factory=list)


@dataclass
class GitBatchState:
    """All a `GitBatchWorkflow` carries across continue-as-new: nothing accepted is dropped."""

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
    # How many ops at the head of `queue` the requested flush covers (those queued when it was
    # asked): an op accepted after a flush waits for its own.
    flush_through: int = 0
    runs: int = 1

