"""Every name that crosses the wire, defined once: workflow types, messages, activities, the queue.

Workflow types, signals, updates and queries are public interface (users type them into the
`temporal` CLI): they never change. Activity names are internal and carry a `taskfleet_` prefix, so
they cannot collide with a user's own activities on the same worker.
"""

DEFAULT_TASK_QUEUE = "taskfleet"

# --- workflow types ---------------------------------------------------------------------------
GIT_BATCH_WORKFLOW = "GitBatchWorkflow"
ORCHESTRATOR_WORKFLOW = "OrchestratorWorkflow"
LESSONS_QUERY_WORKFLOW = "LessonsQueryWorkflow"

# --- GitBatchWorkflow messages ------------------------------------------------------------------
SIGNAL_ENQUEUE = "enqueue"
SIGNAL_FLUSH = "flush"
UPDATE_SUBMIT = "submit"
UPDATE_FLUSH_NOW = "flush_now"
UPDATE_RETRY = "retry"
QUERY_STATUS = "status"
QUERY_STATS = "stats"

# --- OrchestratorWorkflow messages --------------------------------------------------------------
SIGNAL_GIT_OPS_LANDED = "git_ops_landed"
QUERY_PROGRESS = "progress"

# --- LeaseLockWorkflow (one per guarded resource) ---------------------------------------------
LEASE_LOCK_WORKFLOW = "LeaseLockWorkflow"
UPDATE_ACQUIRE = "acquire"
UPDATE_RENEW = "renew"
UPDATE_RELEASE = "release"
SIGNAL_RENEW_LEASE = "renew_lease"  # fire-and-forget twins of the updates, for callers that cannot wait
SIGNAL_RELEASE_LEASE = "release_lease"
QUERY_HOLDERS = "holders"

# --- activities (internal; prefixed so they cannot collide) -------------------------------------
ACTIVITY_RUN_TASK = "taskfleet_run_task"
ACTIVITY_PUSH_BATCH = "taskfleet_push_batch"
ACTIVITY_QUERY_LESSONS = "taskfleet_query_lessons"
ACTIVITY_RECORD_LESSON = "taskfleet_record_lesson"
ACTIVITY_LESSONS_STATS = "taskfleet_lessons_stats"

# Activity names before the prefix. Workflows started by an older taskfleet replay with these
# (`workflow.patched(PATCH_PREFIXED_ACTIVITIES)` tells which a history used).
LEGACY_ACTIVITY_NAMES = {
    ACTIVITY_RUN_TASK: "run_task",
    ACTIVITY_PUSH_BATCH: "push_batch",
    ACTIVITY_QUERY_LESSONS: "query_lessons",
    ACTIVITY_LESSONS_STATS: "lessons_stats",
}
PATCH_PREFIXED_ACTIVITIES = "taskfleet-prefixed-activity-names"
