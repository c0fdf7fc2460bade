"""What workflow code keeps for runs started by an older taskfleet, in one place.

A run replays its history against today's code, so a change that schedules other commands is
guarded with `workflow.patched(<id>)`: False only while replaying a history recorded without it,
which then takes the old path. Older payloads (an outcome a worker of the time sent) are read here
too. The patch ids live in `taskfleet/core/names.py` and never change: a history records them.

Each item says which recorded histories in tests/histories/ take its old path (measured: with the
item's `patched` replaced by `deprecate_patch` and the new path only, those fail `test_replay.py`)
and which carry its marker. "Before 0.2.0" means a taskfleet older than 0.2.0, or a 0.2.0 build
from before the item. A run of a batcher, queue or lock ends at each continue-as-new: the next run
starts on the code of the worker that continued it.

Removing an item takes two steps, each when no run of the stated kind is still open:

1. No run started before 0.2.0 (for the item's old path): call `workflow.deprecate_patch(<id>)`
   instead of `patched` and keep only the new path; delete the histories that took the old path.
2. No run started by a version that called `patched(<id>)`: drop the call. Before that, a history
   that carries the marker would fail ("Non-deprecated patch marker encountered").

Items (in the order a reader meets them):

- `activity_name`: activities were renamed with the `taskfleet_` prefix (the old names are
  `LEGACY_ACTIVITY_NAMES`). Old path: git_batcher_ten_ops, orchestrator_nine_tasks,
  orchestrator_continue_as_new. Marker: most orchestrator and git batcher histories. Before 0.2.0.
- `git_batcher_continues_under_load`: a batcher continues as new under load, carrying its queue,
  instead of waiting for a moment with no flush due. Old path: none recorded. Marker:
  git_batcher_first_run_continued_as_new.
- `git_batcher_times_an_op_on_arrival`: an op reaching an idle batcher (nothing queued, so its wait
  had no timeout) arms the age timer for that op; before, the lone op waited for the next message
  or a flush. Old path: the git batcher histories recorded before it (their idle waits have no
  timer). Marker: git_batcher_idle_arrival.
- `git_batcher_replies_in_background`: a batcher sends a batch's `git_ops_landed` signals while
  the next batch's push runs, all listeners at once; before, it waited for each signal's delivery,
  one listener after another, before it scheduled the next push. Old path: none recorded (the
  histories before it have no listener). Marker: git_batcher_replies_in_background.
- `git_batcher_flush_covers_queued`: a flush pushes the ops queued when it was asked; before, the
  next cut also took any op accepted in between. A worker that takes up a batcher cold can be
  handed a new update together with the last recorded task (when that task sent no command) and
  runs the update first: a flush asked during a push then took an op it never covered, and the
  history so written did not replay. Asked once per run. Old path: every git batcher history
  recorded before it. Marker: git_batcher_cold_update.
- `llm_batcher_continues_between_steps`: the Claude batcher stops between two flushes or polls when
  continue-as-new is due, instead of finishing the loop first. Old path and marker: none recorded.
- `llm_batcher_cuts_at_api_limits`: the Claude batcher cuts a batch at the API's limits (requests,
  bytes); before, also at 1.5 MB of params, which then sat in its history. Asked once per run.
  Old path: llm_batcher_three (its three small requests are cut alike either way). Marker:
  llm_batcher_three--0.2.0.
- Payloads by reference (not a patch: read from the payloads). A Claude task or judge whose start
  input says `stored` prepares, judges and lands in local activities and passes references; one
  without (started before) keeps the activities its history recorded, and a prepared request or a
  reply from before the payload store is inline, read here with its old commands (the judge's
  `taskfleet_judge_record`, the planner's check in the workflow). Old path: llm_task_batched,
  llm_task_fix_round, llm_task_judged_revise, judge_workflow_revise, planner_fix_round,
  orchestrator_llm_three, orchestrator_judged. New path: their `--0.2.0` recordings. Goes when no
  Claude task, judge or plan started before the store is open.
- `llm_task_reports_stages`: a Claude task signals its stage (`task_stage`) to the orchestrator.
  Old path: llm_task_batched, llm_task_fix_round. Marker: llm_task_judged_revise.
- `run_key`: a run's key is its workflow id and first run id (a repeated `run --id X` never
  resumes another run's commits); before, the workflow id alone. Old path: no history fails
  without it, as the key reaches only activity inputs and op ids, which replay does not compare;
  an open run still needs it, for its op ids to match those it already sent.
  orchestrator_nine_tasks, orchestrator_continue_as_new and orchestrator_llm_three were
  recorded before it. Marker: most later orchestrator histories.
- `unkeyed_run_key`: state carried from a run that kept no key at all. Old path: none fails
  without it (as for `run_key`). Goes with `run_key`'s step 1.
- `board_in_pages`: a run reads its board in pages from the clone and keeps outcomes in the run
  store; before, the board rode in the input. Old path: orchestrator_nine_tasks,
  orchestrator_llm_three, orchestrator_cancel_while_landing,
  orchestrator_claims_and_verified_landing.
  Marker: orchestrator_inline_paged (both recordings); a run started with a board reference never
  asks.
- `branches_claimed_up_front`: an inline-board run claims its task branches before any task runs.
  Old path: orchestrator_nine_tasks, orchestrator_llm_three. Marker:
  orchestrator_cancel_while_landing, orchestrator_claims_and_verified_landing. Goes with
  `board_in_pages` (only its old path asks).
- `base_from_remote`: a board with no `base` lands on the remote's default branch; before,
  "main". Old path: none recorded. Marker: orchestrator_queue_semantic.
- `task_env_checked`: a board asking for worker variables is checked against the worker's
  allow-list first. Old path: none recorded. Marker: orchestrator_env_checked,
  orchestrator_env_refused.
- `outcomes_recorded_locally`: run-store appends are a local activity. Old path:
  orchestrator_inline_paged, orchestrator_paged_continue_as_new. Marker: the `--0.2.0`
  orchestrator recordings and the later ones.
- `result_from_memory`: a small run builds its result from the outcomes it recorded instead of
  reading them back. Old path: orchestrator_inline_paged. Marker: most later orchestrator
  histories.
- `cancel_survives_signals`: a cancel that arrives while an orchestrator or a Claude task awaits
  its own signal to another workflow stops it once the signal is settled; before, the signal took
  the cancel and the workflow went on as if none had come. Asked only on that path (a cancel came
  during a signal), so only such runs carry the marker. Old path and marker: none recorded (a
  race a recording does not take on purpose).
- `merge_queue_speculates`: a merge queue verifies several batches at once, each stacked on the
  one ahead, isolates a red batch's culprits apart and confirms a red single entry; before, one
  batch at a time, halves one after the other (workflows/merge_queue/one_at_a_time.py). Asked once
  per run, at its start. Old path: merge_queue_one_batch, merge_queue_bisection,
  merge_queue_after_continue_as_new. Marker: merge_queue_speculating and the later queue
  recordings. Before 0.2.0.
- `landed_commit`: an outcome from a worker that predates `branch_commit` gives a push's branch
  commit in `commit`. Not a patch: read from the payload. Old path: orchestrator_nine_tasks,
  orchestrator_llm_three, orchestrator_cancel_while_landing,
  orchestrator_claims_and_verified_landing, orchestrator_paged_continue_as_new. Goes when no
  worker older than 0.2.0 runs and no run started before 0.2.0 is open (their histories hold
  such outcomes); with it, the histories that took its old path.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.models.git_batch import OpOutcome
    from taskfleet.core.names import (
        LEGACY_ACTIVITY_NAMES,
        PATCH_AGE_TIMER_ON_ARRIVAL,
        PATCH_BATCH_AT_API_LIMITS,
        PATCH_BOARD_PAGES,
        PATCH_CAN_BETWEEN_STEPS,
        PATCH_CAN_UNDER_LOAD,
        PATCH_CANCEL_SURVIVES_SIGNALS,
        PATCH_CLAIM_BRANCHES,
        PATCH_DEFAULT_BASE,
        PATCH_FLUSH_COVERS_QUEUED,
        PATCH_LOCAL_RECORD,
        PATCH_PREFIXED_ACTIVITIES,
        PATCH_QUEUE_SPECULATES,
        PATCH_REPLIES_IN_BACKGROUND,
        PATCH_RESULT_FROM_MEMORY,
        PATCH_RUN_KEY_FIRST_RUN,
        PATCH_TASK_ENV_CHECK,
        PATCH_TASK_STAGES,
    )

# The base of a board that named none, in runs started before it was asked of the remote.
BASE_BEFORE_REMOTE_DEFAULT = "main"


def activity_name(name: str) -> str:
    """The name to schedule `name` under: itself, or its unprefixed name in an older history."""
    return name if workflow.patched(PATCH_PREFIXED_ACTIVITIES) else LEGACY_ACTIVITY_NAMES[name]


def git_batcher_continues_under_load() -> bool:
    return workflow.patched(PATCH_CAN_UNDER_LOAD)


def git_batcher_times_an_op_on_arrival() -> bool:
    return workflow.patched(PATCH_AGE_TIMER_ON_ARRIVAL)


def git_batcher_replies_in_background() -> bool:
    return workflow.patched(PATCH_REPLIES_IN_BACKGROUND)


def git_batcher_flush_covers_queued() -> bool:
    return workflow.patched(PATCH_FLUSH_COVERS_QUEUED)


def llm_batcher_continues_between_steps() -> bool:
    return workflow.patched(PATCH_CAN_BETWEEN_STEPS)


def llm_batcher_cuts_at_api_limits() -> bool:
    return workflow.patched(PATCH_BATCH_AT_API_LIMITS)


def llm_task_reports_stages() -> bool:
    return workflow.patched(PATCH_TASK_STAGES)


def run_key(keyed: str) -> str:
    """`keyed` (the workflow id and its first run id), or the workflow id in an older history."""
    return keyed if workflow.patched(PATCH_RUN_KEY_FIRST_RUN) else workflow.info().workflow_id


def unkeyed_run_key() -> str:
    """The key of a run continued from one that kept none: its workflow id, as that run used."""
    return workflow.info().workflow_id


def board_in_pages() -> bool:
    return workflow.patched(PATCH_BOARD_PAGES)


def branches_claimed_up_front() -> bool:
    return workflow.patched(PATCH_CLAIM_BRANCHES)


def base_from_remote() -> bool:
    return workflow.patched(PATCH_DEFAULT_BASE)


def task_env_checked() -> bool:
    return workflow.patched(PATCH_TASK_ENV_CHECK)


def outcomes_recorded_locally() -> bool:
    return workflow.patched(PATCH_LOCAL_RECORD)


def result_from_memory() -> bool:
    return workflow.patched(PATCH_RESULT_FROM_MEMORY)


def cancel_survives_signals() -> bool:
    return workflow.patched(PATCH_CANCEL_SURVIVES_SIGNALS)


def merge_queue_speculates() -> bool:
    return workflow.patched(PATCH_QUEUE_SPECULATES)


def landed_commit(outcome: OpOutcome) -> str:
    """The commit of the op's branch that landed: `branch_commit`, or, from a worker that predates
    it, a push's branch commit in `commit`."""
    return outcome.branch_commit or (outcome.commit if outcome.op_type == "push" else "")
