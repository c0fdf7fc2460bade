"""The orchestrator's landing bookkeeping: which tasks wait for their branch to land, and until when.

A task that succeeded sent a landing op (to the clone's `GitBatchWorkflow`, or an entry to the
target's merge queue: workflows/queue_landing.py); the run waits for its outcome by op id and
checks that what landed is the task's own commit. An outcome may arrive before the task's result
and is kept for it. Once every task has finished, the run asks for a flush and waits, bounded by
the board's land timeout, for the outcomes still missing.

A mixin of `OrchestratorWorkflow` (workflows/orchestrator.py), whose state and helpers it uses.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.ids import git_batch_workflow_id, landing_op_id, task_of_landing_op
    from taskfleet.core.models.git_batch import OUTCOME_FAILED, GitOpsLanded, OpOutcome
    from taskfleet.core.models.orchestrator import OrchestratorInput, OrchestratorState, TaskResult
    from taskfleet.core.names import SIGNAL_FLUSH

from taskfleet.workflows.compat import landed_commit
from taskfleet.workflows.signals_out import send_signal

# After a cancel: how long to wait for landing outcomes of ops already sent (they land anyway).
CANCEL_LANDING_WAIT = timedelta(seconds=60)
RECENT_PUSHES = 64  # landed batch ids a paged run remembers (to count a push once)
QUEUE_QUIET_SECONDS = 1800.0  # land = "queue": the least time without news before landing times out


def batcher_id(repo: str, remote: str, task_queue: str) -> str:
    """The batcher of this clone and remote on this run's task queue: the workers that serve the run
    serve its pushes too."""
    return git_batch_workflow_id(repo, remote, task_queue=task_queue)


class LandingMixin:
    """Mixed into `OrchestratorWorkflow`, which provides `_after_task`, `_paged`, the merge-queue
    side (`_queued`, `_queue_workflow_id`, `_take_early_queue_outcome`) and the tally."""

    params: OrchestratorInput
    s: OrchestratorState
    git_workflow_id: str
    _running: dict[str, Any]
    _early: dict[str, tuple[OpOutcome, str]]
    _queue_news: int
    _tally: dict[str, int]

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

    def _receive_git_ops_landed(self, message: GitOpsLanded) -> None:
        """Signal `git_ops_landed`: each outcome for an op this run awaits is applied."""
        for outcome in message.outcomes:
            if outcome.op_id in self.s.awaiting_landing:
                self._apply_landing(outcome.op_id, outcome, message.batch_id)
                continue
            # The landing may be reported before run_task returned: keep it for the task's result,
            # only for an op id this run sends for a task that is running now.
            task_id = task_of_landing_op(self.s.run_key, outcome.op_id)
            if task_id in self._running and outcome.op_id == landing_op_id(self.s.run_key, task_id):
                self._early[outcome.op_id] = (outcome, message.batch_id)

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
            await send_signal(target, SIGNAL_FLUSH)  # a cancel meanwhile is raised, not caught here
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

    async def _wait_for_landings_after_cancel(self) -> None:
        """Ops already sent land anyway (a push may be in flight): wait, bounded, for their
        outcomes so that what the run reports as landed is what the remote holds."""
        await self._ask_to_flush()
        try:
            await workflow.wait_condition(
                lambda: not self.s.awaiting_landing, timeout=CANCEL_LANDING_WAIT,
                timeout_summary="cancelled: wait for pushes already sent",
            )
        except asyncio.TimeoutError:
            for task_id in self.s.awaiting_landing.values():
                self.s.outcomes[task_id].reason = "cancelled before its landing was reported"
