"""Wire types of the merge queue: entries, outcomes, `MergeQueueWorkflow` state, queries and
activity I/O.

Plain dataclasses with defaults, so fields can be added later without breaking a caller that sends
an older shape, and `temporal` CLI users read them as JSON.
"""

# No `from __future__ import annotations` here: the data converter resolves these hints on every
# payload, and real (not string) annotations make that several times cheaper.
from dataclasses import dataclass, field
from typing import Optional

from taskfleet.core.models.git_batch import RejectedOp

# Outcomes of an entry.
ENTRY_LANDED = "landed"
# its verify failed (the tail of the output says why), or it cannot land
ENTRY_REJECTED = "rejected"
ENTRY_CONFLICT = "conflict"  # it does not merge onto the target's tip (`files` names where)
ENTRY_STATUSES = (ENTRY_LANDED, ENTRY_REJECTED, ENTRY_CONFLICT)

# Stages of a batch, as `status` shows them.
STAGE_WAITING = "waiting"  # for a verify slot, or for the batch it is stacked on to be merged
STAGE_MERGING = "merging"
STAGE_VERIFYING = "verifying"
STAGE_GREEN = "green"  # verified; lands once every batch ahead of it has
STAGE_RED = "red"  # verified red; decided once every batch ahead of it is green
STAGE_CONFIRMING = "confirming"  # one entry, red once: verified again on the same merge
STAGE_PUSHING = "pushing"
STAGE_BISECTING = "bisecting"

# Where a batch runs: the train lands; an isolation lane tells a red batch's culprits from its
# innocents (which go back to the queue); a confirm lane verifies a red single entry again.
LANE_TRAIN = "train"
LANE_ISOLATE = "isolate"
LANE_CONFIRM = "confirm"

# How one entry fared in a batch's merge chain (build activity).
MERGE_MERGED = "merged"
MERGE_IN_TARGET = "in_target"  # the target already contains its commit: landed, nothing to push
MERGE_CONFLICT = "conflict"
MERGE_REFUSED = "refused"  # its branch is missing or moved: it can never land as sent

# How a push ended (push activity).
PUSH_LANDED = "landed"
PUSH_MOVED = "moved"  # the target is not where the batch was built: rebuild on `tip`


@dataclass
class QueueEntry:
    """One branch waiting to land on the target: by signal `enqueue`, update `submit`, or a task."""

    branch: str
    # The commit `branch` must be at (in the clone) when its batch is built; otherwise it is
    # rejected: what was verified is exactly what the sender meant to land.
    expect_commit: str
    id: str = ""  # given by the workflow when empty; a repeated id is ignored
    reply_to: str = ""  # workflow id that gets signal `queue_outcomes`
    verify: str = ""  # command run on the merged result; default: the queue's `verify`
    task_type: str = ""  # the lesson recorded when it is sent back carries it
    # How likely it is to break the verify (a judge's revise round, a fix round, a re-run after the
    # queue sent it back): a risky entry is verified alone before it joins a batch.
    risk: int = 0
    files: list[str] = field(default_factory=list)  # paths it changes (at most 20)
    # Set by the workflow (ignored when sent): when it was accepted, and the verify runs (batch ids)
    # and bisection steps it took part in, so a run can count what its entries cost.
    enqueued_at: str = ""
    verified_in: list[str] = field(default_factory=list)
    split_in: list[str] = field(default_factory=list)
    seq: int = 0  # its place in the queue: entries sent back from a batch rejoin it there
    passed_alone: bool = False  # verified green apart from the train (a risky entry is, first)


@dataclass
class MergeQueueConfig:
    """Start input of `MergeQueueWorkflow` (the first starter's settings hold for the queue's
    life)."""

    repo: str  # absolute path of the clone on the workers
    target: str  # the branch kept green
    remote: str = "origin"
    verify: str = ""  # default command run on each batch's merged result
    max_batch: int = 8  # the most entries a batch takes (fewer while culprits are frequent)
    max_wait_seconds: float = 30.0  # a batch starts once the oldest entry has waited this long
    parallel: int = 4  # verify runs at once: stacked batches, parts of red ones, confirmations
    flake_retries: int = 1  # more red runs of the same merge before a single entry is a culprit
    verify_timeout_seconds: float = 1800.0
    # How long a verify or push may go without a heartbeat before another worker takes it over.
    heartbeat_timeout_seconds: float = 30.0
    # Test hook: continue-as-new once history passes this many events (0 = the server's suggestion).
    max_history_events: int = 0


@dataclass
class EntryOutcome:
    """What became of one entry; sent to its `reply_to` and kept among `status`'s recent
    outcomes."""

    entry_id: str
    branch: str
    status: str  # landed | rejected | conflict
    reason: str = ""
    files: list[str] = field(default_factory=list)  # conflict: the files that do not merge
    output_tail: str = ""  # rejected: the end of the verify command's output
    # landed: the target's new tip; rejected or conflict: the tip it was judged on (redo work
    # there).
    commit: str = ""
    branch_commit: str = ""  # the entry's commit (its `expect_commit`)
    target: str = ""
    batch_id: str = ""
    # landed: the batch whose push landed it ("" when it was in the target already)
    pushed_in: str = ""
    verified_in: list[str] = field(default_factory=list)
    split_in: list[str] = field(default_factory=list)
    seconds_in_queue: float = 0.0
    decided_at: str = ""


@dataclass
class QueueOutcomes:
    """Signal `queue_outcomes`, sent to each entry's `reply_to` as soon as its fate is known."""

    queue_id: str
    repo: str
    remote: str
    target: str
    outcomes: list[EntryOutcome]


@dataclass
class HeldEntry:
    """An entry that does not merge with the entries ahead of it (but does onto the tip)."""

    entry: QueueEntry
    reason: str = ""
    files: list[str] = field(default_factory=list)


@dataclass
class QueueBatch:
    """Entries merged and verified together, stacked on the batch ahead (or the target's tip)."""

    id: str
    entries: list[QueueEntry]
    verify: str = ""
    stage: str = ""
    base_tip: str = ""  # the commit its merge chain was built on (the push's compare-and-swap)
    merged_commit: str = ""  # the chain's last commit: what is verified and pushed
    half_of: str = ""  # the red batch this is a part of (bisection), or ""
    rebuilds: int = 0  # times the target moved under it
    started_at: str = ""
    lane: str = ""  # train | isolate | confirm ("": a batch of a run that verified one at a time)
    stacked_on: str = ""  # the batch whose merged commit it is built on ("": the target's tip)
    reds: int = 0  # red runs of its merge (a confirmation needs several)
    runs: int = 0  # confirmation runs in flight
    last_part: bool = False  # of a red batch: green with all before it, the red was a flake
    red_tail: str = ""  # the end of the output of its last red run (a culprit's, a flake's)
    # Entries that conflict only with entries ahead of them: answered when it lands, else requeued.
    held: list[HeldEntry] = field(default_factory=list)


@dataclass
class MergeQueueStats:
    entries: int = 0  # accepted
    landed: int = 0
    rejected: int = 0
    conflicts: int = 0
    batches: int = 0  # merge chains verified (halves of a bisection included)
    verify_runs: int = 0
    verify_runs_per_landed: float = 0.0
    bisection_steps: int = 0  # red batches split in two
    pushes: int = 0
    rebuilds: int = 0  # batches rebuilt because the target moved under them
    queue_seconds_total: float = 0.0  # accepted -> decided, summed over decided entries
    queue_seconds_max: float = 0.0
    queue_seconds_avg: float = 0.0
    verify_seconds: float = 0.0
    window: int = 0  # entries the next batch may take
    refused_inputs: int = 0  # messages refused by validation
    flaky_runs: int = 0  # red runs told apart as flakes (the same merge, or its parts, passed)
    confirm_runs: int = 0  # runs of a red single entry's merge again
    cancelled_runs: int = 0  # verify runs stopped because a batch ahead of them went red
    culprit_rate: float = 0.0  # of the entries decided lately, the share rejected by the verify
    red_runs_needed: int = 0  # red runs of one merge making a culprit (flake_retries + 1 or more)
    in_flight: int = 0  # verify runs now
    parallel: int = 0  # ... at most


@dataclass
class MergeQueueStatus:
    """Answer of the `status` query."""

    config: MergeQueueConfig
    queue: list[QueueEntry]
    in_flight: Optional[QueueBatch]
    halves: list[QueueBatch]  # halves of a red batch, waiting their turn (before the queue)
    recent: list[EntryOutcome]
    rejected: list[RejectedOp]
    stats: MergeQueueStats
    runs: int = 1
    target_tip: str = ""
    last_error: str = ""  # the last infrastructure failure (the batch is kept and tried again)
    retry_at: str = ""
    # Every batch in flight, train first in landing order, each with its stage and `stacked_on`.
    batches: list[QueueBatch] = field(default_factory=list)


@dataclass
class MergeQueueState:
    """Everything a `MergeQueueWorkflow` carries across continue-as-new: nothing accepted is
    dropped."""

    queue: list[QueueEntry] = field(default_factory=list)
    halves: list[QueueBatch] = field(default_factory=list)
    window: int = 0
    stats: MergeQueueStats = field(default_factory=MergeQueueStats)
    recent: list[EntryOutcome] = field(default_factory=list)
    rejected: list[RejectedOp] = field(default_factory=list)
    recent_ids: list[str] = field(default_factory=list)
    next_entry: int = 1
    next_batch: int = 1
    flush_requested: bool = False
    runs: int = 1
    target_tip: str = ""
    last_error: str = ""
    retry_at: str = ""
    failures: int = 0  # infrastructure failures in a row (the wait before the next try doubles)
    batches: list[QueueBatch] = field(default_factory=list)  # in flight (none once carried)
    fates: list[int] = field(default_factory=list)  # latest decided entries: 1 culprit, 0 landed
    culprit_files: list[str] = field(default_factory=list)  # paths recent culprits changed
    next_seq: int = 1


@dataclass
class QueueLanding:
    """How a board's task lands through the merge queue (`land = "queue"`), in its `TaskInput`."""

    target: str
    verify: str = ""  # the board's `queue_verify` ("" : each entry carries its task's verify)
    max_batch: int = 8
    max_wait_seconds: float = 30.0
    parallel: int = 4
    flake_retries: int = 1
    # A re-run after the queue sent the task's change back: its number, why, and the target's
    # tip to start from (the queue's view of it; the clone's own branches are never moved).
    attempt: int = 0
    feedback: str = ""
    start_commit: str = ""


@dataclass
class QueueRetry:
    """A task the queue sent back, waiting for its re-run (orchestrator state)."""

    attempt: int
    feedback: str
    start_commit: str = ""


# --- activity I/O --------------------------------------------------------------------------------


@dataclass
class BuildInput:
    repo: str
    remote: str
    target: str
    queue_ref: str  # the private ref the target is fetched into
    batch_id: str
    entries: list[QueueEntry]
    base: str = ""  # the commit to merge onto ("": the target's tip, fetched)


@dataclass
class EntryMerge:
    entry_id: str
    status: str  # merged | in_target | conflict | refused
    reason: str = ""
    files: list[str] = field(default_factory=list)
    # conflict: only with entries ahead of it in this batch (it merges onto the target's tip alone),
    # so it is answered once the batch is through, with the tip to redo it on.
    with_batch: bool = False


@dataclass
class BuildOutput:
    batch_id: str
    tip: str  # the target's tip on the remote, fetched
    head: str  # the chain's last commit (== tip when nothing merged)
    merges: list[EntryMerge]
    seconds: float = 0.0
    base: str = ""  # the commit the chain was built on (the tip, or the merge of the batch ahead)


@dataclass
class VerifyInput:
    repo: str
    commit: str
    command: str
    batch_id: str
    queue_id: str
    target: str
    timeout_seconds: float = 1800.0


@dataclass
class VerifyOutput:
    passed: bool
    exit_code: Optional[int] = None
    timed_out: bool = False
    seconds: float = 0.0
    output_tail: str = ""
    log_path: str = ""


@dataclass
class PushInput:
    repo: str
    remote: str
    target: str
    commit: str
    expected_tip: str
    batch_id: str
    queue_ref: str = ""


@dataclass
class PushOutput:
    status: str  # landed | moved
    tip: str  # the target's tip on the remote after the push (the commit when landed)
    # this attempt moved the target (False: an earlier attempt had, or it moved)
    pushed: bool = False
    seconds: float = 0.0


@dataclass
class DefaultBranchInput:
    repo: str
    remote: str = "origin"

