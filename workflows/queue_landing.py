"""The orchestrator's side of `land = "queue"`: entries' outcomes, and tasks sent back to be redone.

A task's landing activity submits its branch to the target's `MergeQueueWorkflow` (instead of a git
batcher op) and the queue answers with signal `queue_outcomes`. `landed` (at the task's own commit)
marks it landed; `rejected` or `conflict` sends it back to its implementer, up to the board's
`queue_retries`: the task runs again from the target's tip the queue judged it on, with the reason
in its prompt (`TASKFLEET_QUEUE_FEEDBACK` for a command), under its own run key (`<run key>#queue-N`:
own commit trailer, log folder and entry id). Past that it fails with the queue's reason.

A mixin of `OrchestratorWorkflow` (workflows/orchestrator.py), whose state and helpers it uses.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.ids import landing_op_id, merge_queue_workflow_id, queue_run_key
    from taskfleet.core.models.merge_queue import (
        ENTRY_CONFLICT,
        ENTRY_LANDED,
        EntryOutcome,
        QueueLanding,
        QueueOutcomes,
        QueueRetry,
    )
    from taskfleet.core.models.orchestrator import (
        TASK_FAILED,
        TASK_PENDING,
        OrchestratorInput,
        OrchestratorState,
        TaskInput,
        TaskSpec,
    )

QUEUE = "queue"
FEEDBACK_CHARS = 6000  # the queue's reason and the tail of the verify output, as the re-run gets it
RECENT_SEEN = 256  # the queue's batch ids this run remembers, so each verify run and split counts once


class QueueLandingMixin:
    """Mixed into `OrchestratorWorkflow`, which provides `_set_status`, `_after_task`,
    `_forget_old_pushes` and the tally."""

    params: OrchestratorInput
    s: OrchestratorState
    tasks: dict[str, TaskSpec]
    _running: dict[str, Any]
    _early_queue: dict[str, EntryOutcome]
    _queue_news: int
    _tally: dict[str, int]

    # --- where entries go ----------------------------------------------------------------------

    @property
    def _queued(self) -> bool:
        return self.params.board.land == QUEUE

    def _queue_target(self) -> str:
        board = self.params.board
        return board.queue_target or board.base

    def _queue_workflow_id(self) -> str:
        return merge_queue_workflow_id(self.params.repo, self.params.remote, self._queue_target(),
                                       self.params.git_task_queue or workflow.info().task_queue)

    def _queue_input(self, task_input: TaskInput) -> TaskInput:
        """A task's input when it lands through the queue; a re-run starts from where the queue sent it back."""
        board = self.params.board
        retry: Optional[QueueRetry] = self.s.queue_retries.get(task_input.task.id)
        landing = QueueLanding(target=self._queue_target(), verify=board.queue_verify,
                               max_batch=board.queue_max_batch,
                               max_wait_seconds=board.queue_max_wait_seconds,
                               parallel=board.queue_parallel,
                               flake_retries=board.queue_flake_retries)
        if retry is None:
            return replace(task_input, queue=landing)
        landing.attempt, landing.feedback, landing.start_commit = retry.attempt, retry.feedback, retry.start_commit
        # The cached result is the very work the queue sent back: run the task again.
        return replace(task_input, task=replace(task_input.task, refresh=True), queue=landing,
                       run_key=queue_run_key(task_input.run_key, retry.attempt))

    def _entry_id_of(self, task_id: str) -> str:
        retry = self.s.queue_retries.get(task_id)
        return landing_op_id(queue_run_key(self.s.run_key, retry.attempt if retry else 0), task_id)

    # --- outcomes ------------------------------------------------------------------------------

    def _receive_queue_outcomes(self, message: QueueOutcomes) -> None:
        """Signal `queue_outcomes`: each outcome for an entry this run awaits is applied; one for a
        task still running (it may arrive before the task's result) is kept for it."""
        for outcome in message.outcomes:
            if outcome.entry_id in self.s.awaiting_landing:
                self._apply_queue_outcome(outcome)
            elif any(self._entry_id_of(t) == outcome.entry_id for t in self._running):
                self._early_queue[outcome.entry_id] = outcome
        self._queue_news += 1

    def _count_queue_costs(self, outcome: EntryOutcome) -> None:
        stats = self.s.stats
        for batch_id in outcome.verified_in:
            if self._first_sight(f"verify:{batch_id}"):
                stats.queue_verify_runs += 1
        for batch_id in outcome.split_in:
            if self._first_sight(f"split:{batch_id}"):
                stats.queue_bisection_steps += 1
        stats.queue_seconds = round(stats.queue_seconds + outcome.seconds_in_queue, 3)

    def _first_sight(self, key: str) -> bool:
        if key in self.s.queue_seen:
            return False
        self.s.queue_seen = (self.s.queue_seen + [key])[-RECENT_SEEN:]
        return True

    def _apply_queue_outcome(self, outcome: EntryOutcome) -> None:
        entry_id = outcome.entry_id
        task_id = self.s.awaiting_landing[entry_id]
        task = self.s.outcomes[task_id]
        expected = self.s.landing_commits.get(entry_id, "")
        if outcome.status == ENTRY_LANDED and outcome.branch_commit != expected:
            # Not this task's commit (another client's entry with our id): keep waiting.
            task.reason = f"did not land: the queue landed {outcome.branch_commit[:12]}, not the task's {expected[:12]}"
            return
        self._count_queue_costs(outcome)
        del self.s.awaiting_landing[entry_id]
        self.s.landing_commits.pop(entry_id, None)
        sent = self.s.landing_sent_at.pop(entry_id, None)
        stats = self.s.stats
        if outcome.status == ENTRY_LANDED:
            stats.queue_landed += 1
            self.s.queue_retries.pop(task_id, None)
            task.landed, task.reason = True, ""
            task.commit = task.commit or outcome.branch_commit
            self._tally["landed"] += 1
            if sent is not None:
                stats.landing_seconds += max(0.0, workflow.now().timestamp() - sent)
            pushed = f"queue:{outcome.pushed_in}" if outcome.pushed_in else ""
            if pushed and pushed not in self.s.landed_batches:
                self.s.landed_batches.append(pushed)
                self._forget_old_pushes()
            self._after_task(task_id)
            return
        if outcome.status == ENTRY_CONFLICT:
            stats.queue_conflicts += 1
        else:
            stats.queue_rejected += 1
        reason = self._queue_reason(outcome)
        tried = self.s.queue_retries.get(task_id)
        attempt = (tried.attempt if tried else 0) + 1
        if attempt <= self.params.board.queue_retries:
            # Back to its implementer, on the tip the queue judged it on; before anything not yet started.
            stats.queue_resubmits += 1
            self.s.queue_retries[task_id] = QueueRetry(attempt=attempt, feedback=reason[:FEEDBACK_CHARS],
                                                       start_commit=outcome.commit)
            self._set_status(task, TASK_PENDING, f"sent back by the merge queue ({outcome.status}); redoing it")
            self.s.pending.insert(0, task_id)
            self.s.flush_sent = False
            workflow.logger.info("task %s: %s by the merge queue; redoing it (attempt %d)", task_id, outcome.status,
                                 attempt)
            return
        self.s.queue_retries.pop(task_id, None)
        tries = f" after {attempt} attempt(s)" if attempt > 1 else ""
        said = _telling_line(outcome.output_tail)
        # A task's reason is kept short (a run store keeps 300 characters): the queue's reason and the
        # line of the verify output that says most; the whole tail is in the queue's outcome and the lesson.
        self._set_status(task, TASK_FAILED, f"the merge queue answered {outcome.status}{tries}: "
                                            f"{outcome.reason[:160]}" + (f" -- {said[:110]}" if said else ""))
        self._after_task(task_id)

    @staticmethod
    def _queue_reason(outcome: EntryOutcome) -> str:
        """The queue's reason, with the tail of the verify output when it has one (for the re-run's prompt)."""
        if not outcome.output_tail:
            return outcome.reason
        return f"{outcome.reason}\n\nOutput of the verify command (tail):\n{outcome.output_tail}"

    def _take_early_queue_outcome(self, entry_id: str) -> None:
        early = self._early_queue.pop(entry_id, None)
        if early is not None:
            self._apply_queue_outcome(early)

    def _queue_details(self) -> str:
        """The run's merge-queue figures, for the Web UI's current details."""
        s = self.s.stats
        return (f"- merge queue `{self._queue_target()}`: {s.queue_landed} landed, {s.queue_rejected} rejected, "
                f"{s.queue_conflicts} conflict(s), {s.queue_resubmits} sent back and redone\n")

    # --- continue-as-new of a paged run --------------------------------------------------------

    def _carry_requeued(self) -> list[str]:
        """Sent-back tasks not started again yet: their specs travel to the next run (a stored
        board's pages are not read again for them); the ids stay pending."""
        waiting = [t for t in self.s.pending if t in self.s.queue_retries and t in self.tasks]
        self.s.requeued_specs = {t: self.tasks[t] for t in waiting}
        return waiting

    def _restore_requeued(self) -> None:
        if self.s.requeued_specs:
            self.tasks.update(self.s.requeued_specs)
            self.s.pending = [t for t in self.s.requeued_specs] + [t for t in self.s.pending
                                                                    if t not in self.s.requeued_specs]
            self.s.requeued_specs = {}


def _telling_line(output: str) -> str:
    """The line of a command's output that says most about a failure: the last one naming an
    exception (`ImportError: ...`), else an `error:`, else a failure, else the last non-empty one."""
    lines = [line.strip() for line in output.splitlines() if line.strip() and not set(line.strip()) <= set("=-_*")]
    for words in (("Error:", "Exception:"), ("error:", "Error"), ("FAIL", "failed")):
        for line in reversed(lines):
            if any(word in line for word in words):
                return line
    return lines[-1] if lines else ""
