"""Wire types of boards and the orchestrator: task specs, `run_task` I/O, outcomes, progress."""

# No `from __future__ import annotations` here: the data converter resolves these hints on every
# payload, and real (not string) annotations make that several times cheaper on the hot path.
from dataclasses import dataclass, field
from typing import Optional

from taskfleet.core.models.merge_queue import QueueLanding, QueueRetry
from taskfleet.core.models.paging import BoardReference, PagingState
from taskfleet.core.models.review import JudgeTally, Review

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
    # worker variables the task needs (names); each must be one the worker's operator lets tasks
    # see (TASKFLEET_TASK_ENV), or the board is refused before anything starts
    env: list[str] = field(default_factory=list)
    # --- the built-in Claude implementer (`implementer = "anthropic"` instead of `run`) -------------
    implementer: str = ""  # "" (the `run` command) or "anthropic"
    model: str = ""  # "": env TASKFLEET_MODEL on the worker, else taskfleet's default model
    max_tokens: int = 8192
    context: list[str] = field(default_factory=list)  # repo-relative globs read from the base commit
    max_attempts: int = 2  # model calls per task (the first, then fix rounds)
    llm_batch: bool = True  # false: one direct `messages.create` per request
    llm_batch_max_size: int = 100
    llm_batch_max_age_seconds: float = 10.0
    # --- the judge: after verify passes and before landing (`judge = "anthropic"` or `judge_run`) ---
    judge: str = ""  # "" (no Claude judge) or "anthropic"
    judge_model: str = ""  # "": the task's model
    judge_template: str = "judge.j2"
    judge_max_tokens: int = 4096
    judge_run: str = ""  # a command: the diff on stdin; exit 0 approve, 2 revise, else reject


@dataclass
class TaskEnvCheck:
    """Input of `taskfleet_check_task_env`: the worker variables a board's tasks ask for."""

    names: list[str] = field(default_factory=list)


@dataclass
class Board:
    tasks: list[TaskSpec]
    name: str = "board"
    # The branch tasks start from and land on; "" (not named): the remote's default branch, as the
    # clone's `<remote>/HEAD` names it (resolved by the CLI before it starts, else by the worker).
    base: str = ""
    max_parallel: int = 4
    # push: push each task branch; merge: merge it into `base`; queue: through the merge queue of
    # `queue_target`, which verifies the merged result before the target moves.
    land: str = "push"
    path: str = ""
    format: str = "toml"
    queue_verify: str = ""  # run on each merged batch; default the board's `verify`
    queue_target: str = ""  # default `base`
    queue_max_batch: int = 8
    queue_max_wait_seconds: float = 30.0
    queue_retries: int = 1  # times a task sent back by the queue is redone before it fails
    queue_parallel: int = 4  # verify runs the queue keeps going at once
    queue_flake_retries: int = 1  # runs again of a red single entry's merge before it is a culprit


@dataclass
class RefusedTask:
    """A row that cannot run as written: it fails alone; the reason names its line."""

    index: int  # 0-based row index on the board
    id: str
    line: int
    reason: str


@dataclass
class BoardPage:
    start: int
    next: int  # the row after the last one this page covers; == total at the end of the board
    total: int
    tasks: list[TaskSpec] = field(default_factory=list)  # open tasks, ready to run
    rows: list[int] = field(default_factory=list)  # each task's row index, so a run can resume mid-page
    refused: list[RefusedTask] = field(default_factory=list)
    done: int = 0  # rows marked done (`[x]`) in the range: counted, never dispatched
    board_id: str = ""  # the stored board it was read from ("" from an older client)


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
    llm_requests: int = 0
    llm_input_tokens: int = 0
    llm_output_tokens: int = 0
    llm_cache_read_tokens: int = 0
    llm_cost_usd: float = 0.0
    verdict: str = ""  # the judge's last verdict (approve, revise, reject), if the task has a judge


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
    # Honest speed-up: `speedup` is work_seconds / wall_seconds, where work is the tasks' own
    # executor + verification time; taskfleet's own costs are reported beside it.
    work_seconds: float = 0.0
    setup_seconds: float = 0.0  # worktree set-up, summed over tasks
    wait_seconds: float = 0.0  # scheduled -> started on a worker, summed over tasks
    landing_seconds: float = 0.0  # task finished -> its landing reported, summed over landed tasks
    overhead_seconds_per_task: float = 0.0  # (task time beyond work + waiting + landing) / tasks
    llm_api_calls: int = 0  # batch creates + direct calls
    llm_requests: int = 0
    llm_input_tokens: int = 0
    llm_output_tokens: int = 0
    llm_cache_read_tokens: int = 0
    llm_cost_usd: float = 0.0  # estimated, batch discount applied
    # land = "queue": this run's entries and what they cost the queue (verify runs, bisection steps
    # and pushes that included them), time in queue summed over decided entries, and re-runs.
    queue_landed: int = 0
    queue_rejected: int = 0
    queue_conflicts: int = 0
    queue_resubmits: int = 0
    queue_verify_runs: int = 0
    queue_bisection_steps: int = 0
    queue_seconds: float = 0.0
    # The judge (its Claude requests are in the llm_* figures too): verdicts asked for (model
    # requests or judge command runs), the Claude API calls they took, verdicts from the result
    # cache, verdicts by kind, answers that broke submit_review's schema, tokens, estimated cost.
    judge_calls: int = 0
    judge_api_calls: int = 0
    judge_cache_hits: int = 0
    judge_approved: int = 0
    judge_revised: int = 0
    judge_rejected: int = 0
    judge_invalid: int = 0
    judge_input_tokens: int = 0
    judge_output_tokens: int = 0
    judge_cost_usd: float = 0.0


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
    # landing op id -> the task's commit: an outcome counts only if the branch landed at it
    landing_commits: dict[str, str] = field(default_factory=dict)
    # landing op id -> when run_task returned (workflow time, seconds since the epoch)
    landing_sent_at: dict[str, float] = field(default_factory=dict)
    run_key: str = ""  # set once by the first run: `<workflow id>@<first run id>`
    llm_batch_ids: list[str] = field(default_factory=list)  # distinct Message Batches used
    judge_batch_ids: list[str] = field(default_factory=list)  # those of them judge requests went in
    # A paged run (boards by reference): `pending` and `outcomes` hold only the tasks in flight;
    # every finished task's outcome is in the run store.
    paging: Optional[PagingState] = None
    # land = "queue": tasks the queue sent back (task id -> the latest send-back), the queue's verify
    # runs, splits and pushes seen lately (each counted once), and the specs of sent-back tasks a
    # paged run carries to its next run (a stored board's page is not read again for them).
    queue_retries: dict[str, QueueRetry] = field(default_factory=dict)
    queue_seen: list[str] = field(default_factory=list)
    requeued_specs: dict[str, TaskSpec] = field(default_factory=dict)


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
    # The board stored in the clone (`board` then holds only its board-wide settings, no tasks).
    board_ref: Optional[BoardReference] = None
    # Its first rows, read by the client that stored it: the run starts on them without loading
    # (first run only; dropped at continue-as-new).
    first_page: Optional[BoardPage] = None


@dataclass
class TaskInput:
    """Input of `run_task`."""

    task: TaskSpec
    repo: str
    remote: str
    base: str
    land: str
    run_key: str  # `<workflow id>@<first run id>` (the workflow id alone before that patch): commit trailer, op ids
    reply_to: str
    git_task_queue: str
    git_max_batch_size: int = 10
    git_max_batch_age_seconds: float = 5.0
    queue: Optional[QueueLanding] = None  # land = "queue": the merge queue's settings, a re-run's reason
    # --- a task with a judge (set by the workflow that runs its rounds) ---
    hold_landing: bool = False  # commit and return: the judge decides whether the commit lands
    attempt: int = 1  # the implementer's attempt (a revise round is the next one)
    start_commit: str = ""  # a command task's revise round starts from the commit the judge reviewed
    review: Optional[Review] = None  # the judge's review of that commit (TASKFLEET_REVIEW_FILE)
    report_stages: bool = False  # signal `task_stage` to `reply_to` when verification starts
    # Set on the board's last tasks (none was left to start when they started): the landing op ids of
    # all of them, this one's included. Each asks the batcher to flush once all are queued: no later
    # task will fill their batch, and the run's own flush comes two trips through the server later.
    land_together: list[str] = field(default_factory=list)


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
    setup_seconds: float = 0.0  # worktree ready (resolve, take a pool slot, reset it to the base)
    wait_seconds: float = 0.0  # this attempt: scheduled -> started on a worker

    # LLM tasks only: direct calls made, Message Batches used, requests sent, tokens, estimated cost
    llm_direct_calls: int = 0
    llm_batch_ids: list[str] = field(default_factory=list)
    llm_requests: int = 0
    llm_input_tokens: int = 0
    llm_output_tokens: int = 0
    llm_cache_read_tokens: int = 0
    llm_cost_usd: float = 0.0
    # Tasks with a judge: the last verdict, and what judging cost
    verdict: str = ""
    judge: Optional[JudgeTally] = None


@dataclass
class BranchClaim:
    """Input of `claim_branches`: a run takes its task branches on a clone before any task runs."""

    repo: str
    branches: list[str]
    workflow_id: str
    first_run_id: str


@dataclass
class OrchestratorResult:
    tasks: list[TaskOutcome]
    stats: OrchestratorStats
    # Paged runs: where every task's outcome is (`taskfleet.clients.run_store`); `tasks` lists them
    # only when `recorded` is small (RESULT_MAX_TASKS), else it is empty.
    run_ref: str = ""
    repo: str = ""
    recorded: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    failed_ids: list[str] = field(default_factory=list)  # the first FAILED_IDS_CAP


@dataclass
class TaskProgress:
    id: str
    status: str
    landed: bool = False
    reason: str = ""  # why it failed (or did not land), in full
    stage: str = ""  # a running task's: implementing, verifying, judging, landing
    verdict: str = ""  # the judge's last verdict


@dataclass
class OrchestratorProgress:
    counts: dict[str, int]
    running: list[str]
    tasks: list[TaskProgress]  # paged runs: the tasks in flight and the last few finished
    pushes: int = 0
    run_ref: str = ""  # paged runs: the run store (every finished task's outcome)
    repo: str = ""
    total: int = 0  # open tasks on the board
    failed_ids: list[str] = field(default_factory=list)  # the first FAILED_IDS_CAP
    rejected: list[str] = field(default_factory=list)  # `task_stage` signals refused (the last few, described)
