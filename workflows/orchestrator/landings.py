"""How a run's tasks land, behind one interface: `push` and `merge` through the clone's git
batcher, `queue` through the target's merge queue, which may send a task back to be redone. A task
lands only at its own commit; an outcome that comes before the task's result is kept for it; at
the end the run asks for a flush and waits, bounded by a time without news."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Optional

from temporalio import workflow

from taskfleet.workflows.compat import landed_commit
from taskfleet.workflows.orchestrator.run import RunState
from taskfleet.workflows.signals_out import send_signal

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.ids import (
        git_batch_workflow_id,
        landing_op_id,
        merge_queue_workflow_id,
        queue_run_key,
        task_of_landing_op,
    )
    from taskfleet.core.models.git_batch import OUTCOME_FAILED, GitOpsLanded, OpOutcome
    from taskfleet.core.models.merge_queue import (
        ENTRY_CONFLICT,
        ENTRY_LANDED,
        EntryOutcome,
        QueueLanding,
        QueueOutcomes,
        QueueRetry,
    )
    from taskfleet.core.models.orchestrator import TASK_FAILED, TASK_PENDING, TaskInput, TaskResult
    from taskfleet.core.names import SIGNAL_FLUSH

QUEUE = "queue"
CANCEL_LANDING_WAIT = timedelta(seconds=60)  # after a cancel: ops already sent land anyway
RECENT_PUSHES = 64  # landed batch ids a paged run remembers (to count a push once)
QUEUE_QUIET_SECONDS = 1800.0  # land = "queue": the least quiet time before landing times out
FEEDBACK_CHARS = 6000  # the queue's reason and verify output tail, as the re-run gets it
RECENT_SEEN = 256  # the queue's batch ids remembered, so each verify run and split counts once


def batcher_id(repo: str, remote: str, task_queue: str) -> str:
    """The batcher of this clone and remote on the run's task queue."""
    return git_batch_workflow_id(repo, remote, task_queue=task_queue)


def landings_for(run: RunState) -> "Landings":
    return (QueueLandings if run.params.board.land == QUEUE else Landings)(run)


class Landings:
    """Landing through the clone's git batcher (`push`, `merge`); the base of the merge queue's."""

    queued = False

    def __init__(self, run: RunState) -> None:
        self.run = run
        self.s = run.s
        self.git_workflow_id = batcher_id(run.params.repo, run.params.remote, run.task_queue)
        # Landing outcomes that arrived before their task's result (op id -> outcome, batch id).
        self._early: dict[str, tuple[OpOutcome, str]] = {}
        self._early_queue: dict[str, EntryOutcome] = {}  # the same from a merge queue, by entry id
        self._news = 0  # queue outcomes received: a wait for landings that sees news goes on

    # --- where landings go ---------------------------------------------------------------------

    def workflow_id(self) -> str:
        return self.git_workflow_id

    def task_input(self, task_input: TaskInput) -> TaskInput:
        return task_input

    def quiet_seconds(self) -> float:
        return self.run.params.land_timeout_seconds

    def details(self) -> str:
        return ""

    # --- outcomes ------------------------------------------------------------------------------

    def expect(self, task_id: str, result: TaskResult) -> None:
        """The task's landing op was sent: wait for its outcome, by op id and commit."""
        op_id = result.landing_op_id
        self.s.awaiting_landing[op_id] = task_id
        self.s.landing_commits[op_id] = result.commit
        self.s.landing_sent_at[op_id] = workflow.now().timestamp()
        early = self._early.pop(op_id, None)
        if early is not None:
            self._apply(op_id, *early)
        early_entry = self._early_queue.pop(op_id, None)
        if early_entry is not None:
            self._apply_entry(early_entry)

    def receive_git(self, message: GitOpsLanded) -> None:
        """Signal `git_ops_landed`: each outcome for an op this run awaits is applied."""
        for outcome in message.outcomes:
            if outcome.op_id in self.s.awaiting_landing:
                self._apply(outcome.op_id, outcome, message.batch_id)
                continue
            # Reported before run_task returned: kept if it is this run's op for a running task.
            task_id = task_of_landing_op(self.s.run_key, outcome.op_id)
            if (task_id in self.run.running
                    and outcome.op_id == landing_op_id(self.s.run_key, task_id)):
                self._early[outcome.op_id] = (outcome, message.batch_id)

    def receive_queue(self, message: QueueOutcomes) -> None:
        """Signal `queue_outcomes`: each outcome for an entry this run awaits is applied; one for a
        task still running (it may arrive before the task's result) is kept for it."""
        for outcome in message.outcomes:
            if outcome.entry_id in self.s.awaiting_landing:
                self._apply_entry(outcome)
            elif any(self.entry_id_of(t) == outcome.entry_id for t in self.run.running):
                self._early_queue[outcome.entry_id] = outcome
        self._news += 1

    def entry_id_of(self, task_id: str) -> str:
        retry = self.s.queue_retries.get(task_id)
        return landing_op_id(queue_run_key(self.s.run_key, retry.attempt if retry else 0), task_id)

    def _apply(self, op_id: str, outcome: OpOutcome, batch_id: str) -> None:
        task_id = self.s.awaiting_landing[op_id]
        task = self.s.outcomes[task_id]
        expected = self.s.landing_commits.get(op_id, "")
        if outcome.status == OUTCOME_FAILED:
            landed, task.reason = False, f"did not land: {outcome.reason}"
        elif landed_commit(outcome) != expected:
            # Not this task's commit (another client's op, a moved branch): keep waiting.
            task.reason = (f"did not land: {outcome.branch} landed at "
                           f"{landed_commit(outcome)[:12] or 'an unknown commit'}, "
                           f"not the task's commit {expected[:12]}")
            return
        else:
            landed = True
            if batch_id not in self.s.landed_batches:
                self.s.landed_batches.append(batch_id)
            self._count_landing_time(op_id)
        self.run.tally["landed"] += int(landed) - int(task.landed)
        task.landed = landed
        self._forget(op_id)
        self.forget_old_pushes()
        self.run.after_task(task_id)

    def _apply_entry(self, outcome: EntryOutcome) -> None:
        """A merge queue's outcome (the base applies it too: it may answer any run's entries)."""
        entry_id = outcome.entry_id
        task_id = self.s.awaiting_landing[entry_id]
        task = self.s.outcomes[task_id]
        expected = self.s.landing_commits.get(entry_id, "")
        if outcome.status == ENTRY_LANDED and outcome.branch_commit != expected:
            # Not this task's commit (another client's entry with our id): keep waiting.
            task.reason = (f"did not land: the queue landed {outcome.branch_commit[:12]}, "
                           f"not the task's {expected[:12]}")
            return
        self._count_queue_costs(outcome)
        stats = self.s.stats
        if outcome.status == ENTRY_LANDED:
            self._count_landing_time(entry_id)
            self._forget(entry_id)
            stats.queue_landed += 1
            self.s.queue_retries.pop(task_id, None)
            task.landed, task.reason = True, ""
            task.commit = task.commit or outcome.branch_commit
            self.run.tally["landed"] += 1
            pushed = f"queue:{outcome.pushed_in}" if outcome.pushed_in else ""
            if pushed and pushed not in self.s.landed_batches:
                self.s.landed_batches.append(pushed)
                self.forget_old_pushes()
            self.run.after_task(task_id)
            return
        self._forget(entry_id)
        if outcome.status == ENTRY_CONFLICT:
            stats.queue_conflicts += 1
        else:
            stats.queue_rejected += 1
        self._sent_back(task_id, outcome)

    def _sent_back(self, task_id: str, outcome: EntryOutcome) -> None:
        """The queue refused the task's change: redone on the tip it was judged on, or failed."""
        task = self.s.outcomes[task_id]
        reason = queue_reason(outcome)
        tried = self.s.queue_retries.get(task_id)
        attempt = (tried.attempt if tried else 0) + 1
        if attempt <= self.run.params.board.queue_retries:
            # Back to its implementer, on the tip the queue judged; ahead of tasks not yet started.
            self.s.stats.queue_resubmits += 1
            self.s.queue_retries[task_id] = QueueRetry(
                attempt=attempt, feedback=reason[:FEEDBACK_CHARS], start_commit=outcome.commit)
            self.run.set_status(task, TASK_PENDING,
                                f"sent back by the merge queue ({outcome.status}); redoing it")
            self.s.pending.insert(0, task_id)
            self.s.flush_sent = False
            workflow.logger.info("task %s: %s by the merge queue; redoing it (attempt %d)", task_id,
                                 outcome.status, attempt)
            return
        self.s.queue_retries.pop(task_id, None)
        tries = f" after {attempt} attempt(s)" if attempt > 1 else ""
        said = telling_line(outcome.output_tail)
        # Short: a run store keeps 300 chars; the queue's outcome and lesson hold the whole tail.
        self.run.set_status(task, TASK_FAILED,
                            f"the merge queue answered {outcome.status}{tries}: "
                            f"{outcome.reason[:160]}" + (f" -- {said[:110]}" if said else ""))
        self.run.after_task(task_id)

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

    def _count_landing_time(self, op_id: str) -> None:
        sent = self.s.landing_sent_at.get(op_id)
        if sent is not None:
            self.s.stats.landing_seconds += max(0.0, workflow.now().timestamp() - sent)

    def _forget(self, op_id: str) -> None:
        del self.s.awaiting_landing[op_id]
        self.s.landing_commits.pop(op_id, None)
        self.s.landing_sent_at.pop(op_id, None)

    def forget_old_pushes(self) -> None:
        if self.run.paged and len(self.s.landed_batches) > RECENT_PUSHES:
            # A batch's landings arrive together: the last few ids suffice to count each push once.
            del self.s.landed_batches[0]
            self.s.paging.pushes_forgotten += 1

    def carry_requeued(self) -> list[str]:
        """Sent-back tasks not started again yet: their specs travel to the next run (a stored
        board's pages are not read again for them); the ids stay pending."""
        waiting = [t for t in self.s.pending if t in self.s.queue_retries and t in self.run.tasks]
        self.s.requeued_specs = {t: self.run.tasks[t] for t in waiting}
        return waiting

    def pushes(self) -> int:
        forgotten = self.s.paging.pushes_forgotten if self.s.paging else 0
        return len(self.s.landed_batches) + forgotten

    # --- waiting -------------------------------------------------------------------------------

    async def ask_to_flush(self) -> None:
        target = self.workflow_id()
        try:
            await send_signal(target, SIGNAL_FLUSH)  # a cancel meanwhile is raised, not caught here
        except Exception as err:  # noqa: BLE001 - the age flush still lands them
            workflow.logger.warning("could not ask %s to flush: %s", target, err)

    async def await_all(self) -> None:
        """Wait (bounded by a time without news) until every landing this run sent is reported."""
        if self.s.awaiting_landing and not self.s.flush_sent:
            self.s.flush_sent = True  # every task has finished: land what is queued now
            await self.ask_to_flush()
        timeout = self.quiet_seconds()
        while True:
            news = self._news
            try:
                await workflow.wait_condition(
                    lambda: not self.s.awaiting_landing or bool(self.s.pending),
                    timeout=timedelta(seconds=timeout),
                    timeout_summary=f"land timeout: give up waiting for pushes after {timeout:g}s")
            except asyncio.TimeoutError:
                if self._news != news:
                    continue  # the merge queue is still answering: wait on
                expired = list(self.s.awaiting_landing.values())
                for task_id in expired:
                    outcome = self.s.outcomes[task_id]
                    outcome.reason = (f"not landed within {timeout:g}s"
                                      + (f" ({outcome.reason})" if outcome.reason else ""))
                self.s.awaiting_landing.clear()
                for task_id in expired:
                    self.run.after_task(task_id)
            break
        if self.s.pending:
            return  # tasks sent back by the merge queue run again first
        await workflow.wait_condition(workflow.all_handlers_finished)

    async def await_after_cancel(self) -> None:
        """Ops already sent land anyway (a push may be in flight): wait, bounded, for their
        outcomes, so that what the run reports as landed is what the remote holds."""
        await self.ask_to_flush()
        try:
            await workflow.wait_condition(lambda: not self.s.awaiting_landing,
                                          timeout=CANCEL_LANDING_WAIT,
                                          timeout_summary="cancelled: wait for pushes already sent")
        except asyncio.TimeoutError:
            for task_id in self.s.awaiting_landing.values():
                self.s.outcomes[task_id].reason = "cancelled before its landing was reported"


class QueueLandings(Landings):
    """`land = "queue"`: each task's branch goes to the target's merge queue; one sent back is
    redone (up to `queue_retries`) from the tip it was judged on, as `<run key>#queue-N`."""

    queued = True

    def __init__(self, run: RunState) -> None:
        super().__init__(run)
        if self.s.requeued_specs:  # sent-back tasks a paged run carried: they go first again
            run.tasks.update(self.s.requeued_specs)
            self.s.pending = list(self.s.requeued_specs) + [t for t in self.s.pending
                                                              if t not in self.s.requeued_specs]
            self.s.requeued_specs = {}

    def target(self) -> str:
        board = self.run.params.board
        return board.queue_target or board.base

    def workflow_id(self) -> str:
        params = self.run.params
        return merge_queue_workflow_id(params.repo, params.remote, self.target(),
                                       self.run.task_queue)

    def task_input(self, task_input: TaskInput) -> TaskInput:
        """A re-run starts from where the queue sent it back, its cached result bypassed."""
        board = self.run.params.board
        retry: Optional[QueueRetry] = self.s.queue_retries.get(task_input.task.id)
        landing = QueueLanding(target=self.target(), verify=board.queue_verify,
                               max_batch=board.queue_max_batch,
                               max_wait_seconds=board.queue_max_wait_seconds,
                               parallel=board.queue_parallel,
                               flake_retries=board.queue_flake_retries)
        if retry is None:
            return replace(task_input, queue=landing)
        landing.attempt, landing.feedback, landing.start_commit = (
            retry.attempt, retry.feedback, retry.start_commit)
        return replace(task_input, task=replace(task_input.task, refresh=True), queue=landing,
                       run_key=queue_run_key(task_input.run_key, retry.attempt))

    def quiet_seconds(self) -> float:
        # Verifies may take long, but each batch the queue finishes answers some entries.
        return max(self.run.params.land_timeout_seconds, QUEUE_QUIET_SECONDS)

    def details(self) -> str:
        s = self.s.stats
        return (f"- merge queue `{self.target()}`: {s.queue_landed} landed, "
                f"{s.queue_rejected} rejected, {s.queue_conflicts} conflict(s), "
                f"{s.queue_resubmits} sent back and redone\n")


def queue_reason(outcome: EntryOutcome) -> str:
    """The queue's reason, with the tail of the verify output when it has one (for the re-run)."""
    if not outcome.output_tail:
        return outcome.reason
    return f"{outcome.reason}\n\nOutput of the verify command (tail):\n{outcome.output_tail}"


def telling_line(output: str) -> str:
    """The line of a command's output that says most about a failure: the last one naming an
    exception (`ImportError: ...`), else an `error:`, else a failure, else the last one."""
    lines = [line.strip() for line in output.splitlines()
             if line.strip() and not set(line.strip()) <= set("=-_*")]
    for words in (("Error:", "Exception:"), ("error:", "Error"), ("FAIL", "failed")):
        for line in reversed(lines):
            if any(word in line for word in words):
                return line
    return lines[-1] if lines else ""
