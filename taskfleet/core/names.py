"""Every name that crosses the wire, defined once: workflow types, messages, activities, the queue.

Workflow types, signals, updates and queries are public interface (users type them into the
`temporal` CLI): they never change. Activity names are internal and carry a `taskfleet_` prefix, so
they cannot collide with a user's own activities on the same worker.
"""

DEFAULT_TASK_QUEUE = "taskfleet"
# Where coordination workflows that must be one per resource (lease locks: a clone's branch claims,
# a worker's presence) run: every taskfleet worker polls it beside its own task queue.
COORDINATION_TASK_QUEUE = "taskfleet-coordination"

# --- workflow types ---------------------------------------------------------------------------
GIT_BATCH_WORKFLOW = "GitBatchWorkflow"
ORCHESTRATOR_WORKFLOW = "OrchestratorWorkflow"
LESSONS_QUERY_WORKFLOW = "LessonsQueryWorkflow"
LLM_BATCH_WORKFLOW = "LLMBatchWorkflow"
LLM_TASK_WORKFLOW = "LLMTaskWorkflow"
MERGE_QUEUE_WORKFLOW = "MergeQueueWorkflow"
PLANNER_WORKFLOW = "PlannerWorkflow"
JUDGE_WORKFLOW = "JudgeWorkflow"

# --- GitBatchWorkflow messages ------------------------------------------------------------------
SIGNAL_ENQUEUE = "enqueue"
SIGNAL_FLUSH = "flush"
FLUSH_AFTER = "after"  # flush({"after": [op ids]}): flush once every one of these ops is accepted
UPDATE_SUBMIT = "submit"
UPDATE_FLUSH_NOW = "flush_now"
UPDATE_RETRY = "retry"
QUERY_STATUS = "status"
QUERY_STATS = "stats"
# Error type of a `flush_now`/`retry` refused while the batcher continues as new: send it again.
CONTINUING_AS_NEW = "ContinuingAsNew"

# --- MergeQueueWorkflow messages -----------------------------------------------------------------
# It takes the batcher's message names (one vocabulary for both): signal `enqueue(entry)`, signal
# `flush`, update `submit(entry) -> entry id`, queries `status` and `stats`. Each entry's `reply_to`
# gets this signal with its outcome (landed, rejected or conflict):
SIGNAL_QUEUE_OUTCOMES = "queue_outcomes"

# --- OrchestratorWorkflow messages --------------------------------------------------------------
SIGNAL_GIT_OPS_LANDED = "git_ops_landed"
QUERY_PROGRESS = "progress"

# --- LLMBatchWorkflow / LLMTaskWorkflow messages (and `flush`, `status`) ------------------------
SIGNAL_SUBMIT = "submit"  # to LLMBatchWorkflow: one request to send in the next batch
SIGNAL_LLM_REPLY = "llm_reply"  # to the LLMTaskWorkflow that submitted: its result

# --- PlannerWorkflow / JudgeWorkflow: the `status` query ------------------------------------------
SIGNAL_TASK_STAGE = "task_stage"  # to OrchestratorWorkflow: a task moved to another stage

# --- LeaseLockWorkflow (one per guarded resource) ---------------------------------------------
LEASE_LOCK_WORKFLOW = "LeaseLockWorkflow"
UPDATE_ACQUIRE = "acquire"
UPDATE_RENEW = "renew"
UPDATE_RELEASE = "release"
# Fire-and-forget twins of the updates, for callers that cannot wait.
SIGNAL_RENEW_LEASE = "renew_lease"
SIGNAL_RELEASE_LEASE = "release_lease"
QUERY_HOLDERS = "holders"

# --- activities (internal; prefixed so they cannot collide) -------------------------------------
ACTIVITY_RUN_TASK = "taskfleet_run_task"
ACTIVITY_PUSH_BATCH = "taskfleet_push_batch"
ACTIVITY_QUERY_LESSONS = "taskfleet_query_lessons"
ACTIVITY_RECORD_LESSON = "taskfleet_record_lesson"
ACTIVITY_LESSONS_STATS = "taskfleet_lessons_stats"
ACTIVITY_CLAIM_BRANCHES = "taskfleet_claim_branches"
ACTIVITY_CHECK_TASK_ENV = "taskfleet_check_task_env"
ACTIVITY_LLM_PREPARE = "taskfleet_llm_prepare"
ACTIVITY_LLM_SUBMIT = "taskfleet_llm_submit"
ACTIVITY_LLM_CALL_DIRECT = "taskfleet_llm_call_direct"
ACTIVITY_LLM_CREATE_BATCH = "taskfleet_llm_create_batch"
ACTIVITY_LLM_POLL_BATCH = "taskfleet_llm_poll_batch"
ACTIVITY_LLM_DELIVER_RESULTS = "taskfleet_llm_deliver_results"
ACTIVITY_LLM_APPLY = "taskfleet_llm_apply"
ACTIVITY_LLM_RECORD_FAILURE = "taskfleet_llm_record_failure"
ACTIVITY_QUEUE_BUILD = "taskfleet_queue_build"
ACTIVITY_QUEUE_VERIFY = "taskfleet_queue_verify"
ACTIVITY_QUEUE_PUSH = "taskfleet_queue_push"
ACTIVITY_DEFAULT_BRANCH = "taskfleet_default_branch"
ACTIVITY_PLAN_PREPARE = "taskfleet_plan_prepare"
ACTIVITY_JUDGE_PREPARE = "taskfleet_judge_prepare"
ACTIVITY_JUDGE_COMMAND = "taskfleet_judge_command"
ACTIVITY_JUDGE_RECORD = "taskfleet_judge_record"
ACTIVITY_JUDGE_VERDICT = "taskfleet_judge_verdict"
ACTIVITY_PLAN_CHECK = "taskfleet_plan_check"
ACTIVITY_LAND_TASK = "taskfleet_land_task"

# Activity names before the prefix. Workflows started by an older taskfleet replay with these
# (`workflow.patched(PATCH_PREFIXED_ACTIVITIES)` tells which a history used).
LEGACY_ACTIVITY_NAMES = {
    ACTIVITY_RUN_TASK: "run_task",
    ACTIVITY_PUSH_BATCH: "push_batch",
    ACTIVITY_QUERY_LESSONS: "query_lessons",
    ACTIVITY_LESSONS_STATS: "lessons_stats",
}
PATCH_PREFIXED_ACTIVITIES = "taskfleet-prefixed-activity-names"

# Orchestrator changes guarded for replay (each id is recorded in the histories that use it).
PATCH_RUN_KEY_FIRST_RUN = "taskfleet-run-key-first-run-id"
PATCH_CLAIM_BRANCHES = "taskfleet-claim-branches"
# A board whose tasks ask for worker variables (`env`) is checked against the worker's allow-list
# first.
PATCH_TASK_ENV_CHECK = "taskfleet-task-env-check"

# --- boards by reference and the run store ------------------------------------------------------
ACTIVITY_STORE_BOARD = "taskfleet_store_board"
ACTIVITY_LOAD_BOARD_PAGE = "taskfleet_load_board_page"
ACTIVITY_RECORD_OUTCOMES = "taskfleet_record_outcomes"
ACTIVITY_READ_OUTCOMES = "taskfleet_read_outcomes"
ACTIVITY_RUN_TASK_GROUP = "taskfleet_run_task_group"
# A run started by this version reads its board in pages and keeps outcomes in the run store.
PATCH_BOARD_PAGES = "taskfleet-board-pages"
# A small paged run builds its result from the outcomes it recorded, instead of reading them back.
PATCH_RESULT_FROM_MEMORY = "taskfleet-result-from-memory"
# Outcomes are appended to the run store by a local activity (no server round trip).
PATCH_LOCAL_RECORD = "taskfleet-local-record"

# A board that names no `base` lands on the remote's default branch, asked of the clone by the
# worker
# (runs started before this took "main").
PATCH_DEFAULT_BASE = "taskfleet-default-base-from-remote"
# A Claude task tells the orchestrator when it moves to another stage (signal `task_stage`).
PATCH_TASK_STAGES = "taskfleet-task-stages"
# A git batcher continues as new under load, carrying its queue (before, it waited for a moment
# with no flush due, which a stream never gives).
PATCH_CAN_UNDER_LOAD = "git-batcher-continue-as-new-under-load"
# The Claude batcher continues as new between two flushes or polls (before, it finished the loop).
PATCH_CAN_BETWEEN_STEPS = "llm-batcher-continue-as-new-between-steps"
# The Claude batcher cuts a batch at the API's limits (before, at 1.5 MB of params in its history).
PATCH_BATCH_AT_API_LIMITS = "llm-batcher-cuts-at-api-limits"
# An op reaching an idle git batcher (nothing queued, so no age timer) arms the timer for its age.
PATCH_AGE_TIMER_ON_ARRIVAL = "git-batcher-age-timer-on-arrival"
# A git batcher sends a batch's `git_ops_landed` signals while the next batch runs (before, it
# waited for their delivery before it scheduled the next push).
PATCH_REPLIES_IN_BACKGROUND = "git-batcher-replies-in-background"
# A git batcher's flush covers the ops queued when it was asked (before, also any op accepted
# before the next cut, which made the batch depend on the order of one task's jobs).
PATCH_FLUSH_COVERS_QUEUED = "git-batcher-flush-covers-what-is-queued"
# A cancel that arrives while a workflow's own signal to another workflow is in flight stops the
# workflow once the signal is settled (before, the signal took the cancel and the workflow went on).
PATCH_CANCEL_SURVIVES_SIGNALS = "taskfleet-cancel-survives-signals"
# A merge queue verifies batches speculatively, several at once, each stacked on the one ahead
# (before, one batch at a time, its halves one after the other).
PATCH_QUEUE_SPECULATES = "merge-queue-speculates"
