"""`GitBatchWorkflow`: one per (clone, remote); queues git ops and lands each batch with one push.

It is the single writer for its remote: batches run one at a time, in order, so ops of one branch
land in the order they were accepted. Its queue lives in workflow state, so an accepted op survives
worker crashes and continue-as-new until it is landed or reported failed.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any, Optional

from taskfleet.workflows.activity_names import activity_name
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.git_op_validation import InvalidGitOp, parse_config, parse_git_op
    from taskfleet.core.models.git_batch import (
        BATCH_COMPLETED,
        BATCH_EXECUTING,
        BATCH_FAILED,
        BATCH_PENDING,
        OUTCOME_FAILED,
        BatchResult,
        GitBatch,
        GitBatchConfig,
        GitBatchState,
        GitBatchStats,
        GitBatchStatus,
        GitOp,
        GitOpsLanded,
        OpOutcome,
        PushBatchInput,
        PushBatchOutput,
        RejectedOp,
    )
    from taskfleet.core.names import (
        ACTIVITY_PUSH_BATCH,
        GIT_BATCH_WORKFLOW,
        QUERY_STATS,
        QUERY_STATUS,
        SIGNAL_ENQUEUE,
        SIGNAL_FLUSH,
        SIGNAL_GIT_OPS_LANDED,
        UPDATE_FLUSH_NOW,
        UPDATE_RETRY,
        UPDATE_SUBMIT,
    )

RECENT_BATCHES = 20
RECENT_REJECTIONS = 100
RECENT_IDS = 5_000
PUSH_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
    non_retryable_error_types=["InvalidRepository"],
)


def _refs_touched(ops: list[GitOp]) -> int:
    return len({(op.target or "<default>") if op.op_type == "merge" else op.branch for op in ops})


# Worker Versioning: AUTO_UPGRADE. A clone's batcher never ends (it continues as new), so pinned it
# would hold its first version forever and that version could never drain. Moving is safe: all
# state that survives continue-as-new travels as data (the carried state dataclass), which the next
# version reads; a move mid-run replays this run's history on the new code, so any new command is
# guarded with `workflow.patched` (as the renamed activities are) and old histories still replay.
@workflow.defn(name=GIT_BATCH_WORKFLOW, versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class GitBatchWorkflow:
    @workflow.init
    def __init__(self, config: Any, state: Optional[GitBatchState] = None) -> None:
        # The start input arrives as plain JSON (CLI users send it by hand), so it is parsed here
        # rather than by the data converter, which would wedge the workflow task on a bad field.
        self._config_error = ""
        try:
            self.config = parse_config(config)
        except InvalidGitOp as err:
            self._config_error = str(err)
            self.config = GitBatchConfig(repo=str((config or {}).get("repo", "")) if isinstance(config, dict) else "")
        self.s = state or GitBatchState()
        self._seen = set(self.s.recent_ids)
        self._executing: Optional[GitBatch] = None
        self._finished: dict[str, GitBatch] = {}

    # --- run loop --------------------------------------------------------------------------------

    @workflow.run
    async def run(self, config: Any, state: Optional[GitBatchState] = None) -> None:
        if self._config_error:
            raise ApplicationError(f"bad GitBatchWorkflow start input: {self._config_error}", non_retryable=True)
        workflow.logger.info(
            "git batcher for %s (%s) run %d: %d queued, %d failed batches carried",
            self.config.repo,
            self.config.remote,
            self.s.runs,
            len(self.s.queue),
            len(self.s.failed_batches),
        )
        self._refresh_details()
        while True:
            try:
                await workflow.wait_condition(
                    lambda: self._flush_due() or bool(self.s.pending_batches) or self._should_continue_as_new(),
                    timeout=self._until_oldest_is_due(),
                )
            except asyncio.TimeoutError:
                pass
            if self._flush_due():
                self._cut_batches()
            while self.s.pending_batches:
                await self._execute(self.s.pending_batches[0])
            if self._should_continue_as_new():
                # Updates (flush_now, retry) wait on batches this loop runs: keep running them
                # until every handler has returned, then hand the state to the next run.
                await workflow.wait_condition(
                    lambda: workflow.all_handlers_finished() or self._flush_due() or bool(self.s.pending_batches)
                )
                if workflow.all_handlers_finished() and not self.s.pending_batches and not self._flush_due():
                    self.s.runs += 1
                    self.s.recent_ids = self.s.recent_ids[-RECENT_IDS:]
                    workflow.logger.info("continuing as new with %d queued ops", len(self.s.queue))
                    workflow.continue_as_new(args=[self.config, self.s])

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        if info.is_continue_as_new_suggested():
            return True
        limit = self.config.max_history_events
        return bool(limit) and info.get_current_history_length() >= limit

    def _oldest_age_seconds(self) -> float:
        if not self.s.queue:
            return 0.0
        enqueued = datetime.fromisoformat(self.s.queue[0].enqueued_at)
        return (workflow.now() - enqueued).total_seconds()

    def _until_oldest_is_due(self) -> Optional[timedelta]:
        if not self.s.queue:
            return None
        remaining = self.config.max_batch_age_seconds - self._oldest_age_seconds()
        return timedelta(seconds=max(remaining, 0.001))

    def _flush_due(self) -> bool:
        if self.s.flush_requested:
            return True
        if not self.s.queue:
            return False
        return (
            len(self.s.queue) >= self.config.max_batch_size
            or self._oldest_age_seconds() >= self.config.max_batch_age_seconds
        )

    def _cut_batches(self) -> list[GitBatch]:
        """Queue -> pending batches of at most max_batch_size; failed batches are retried first."""
        cut: list[GitBatch] = []
        full_only = not self.s.flush_requested and self._oldest_age_seconds() < self.config.max_batch_age_seconds
        if not full_only:
            for batch in self.s.failed_batches:
                batch.status = BATCH_PENDING
                cut.append(batch)
            self.s.failed_batches = []
        size = self.config.max_batch_size
        while self.s.queue and (len(self.s.queue) >= size or not full_only):
            ops, self.s.queue = self.s.queue[:size], self.s.queue[size:]
            batch = GitBatch(
                id=f"batch-{self.s.next_batch}",
                ops=ops,
                created_at=workflow.now().isoformat(),
            )
            self.s.next_batch += 1
            cut.append(batch)
        self.s.flush_requested = False
        self.s.pending_batches.extend(cut)
        self._refresh_details()
        return cut

    async def _execute(self, batch: GitBatch) -> None:
        batch.status = BATCH_EXECUTING
        batch.attempts += 1
        batch.executed_at = workflow.now().isoformat()
        self._executing = batch
        self._refresh_details()
        summary = f"push {_refs_touched(batch.ops)} refs to {self.config.remote} ({batch.id})"
        try:
            result: PushBatchOutput = await workflow.execute_activity(
                activity_name(ACTIVITY_PUSH_BATCH),
                PushBatchInput(
                    batch_id=batch.id,
                    repo=self.config.repo,
                    remote=self.config.remote,
                    ops=batch.ops,
                    atomic=self.config.atomic,
                    attempt=batch.attempts,
                ),
                result_type=PushBatchOutput,
                start_to_close_timeout=timedelta(minutes=10),
                heartbeat_timeout=timedelta(seconds=self.config.heartbeat_timeout_seconds),
                retry_policy=PUSH_RETRY,
                summary=summary,
            )
        except ActivityError as err:
            batch.status = BATCH_FAILED
            batch.error = root_cause_message(err)
            batch.outcomes = [
                OpOutcome(op.id, op.op_type, op.branch, OUTCOME_FAILED, reason=f"batch failed: {batch.error}")
                for op in batch.ops
            ]
            workflow.logger.warning("%s failed, kept for retry: %s", batch.id, batch.error)
        else:
            batch.status = BATCH_COMPLETED
            batch.error = ""
            batch.outcomes = result.outcomes
            batch.execute_seconds = result.seconds
            self._count(result)
        finally:
            self._executing = None
        self.s.pending_batches.remove(batch)
        if batch.status == BATCH_FAILED:
            self.s.failed_batches.append(batch)
        else:
            self.s.executed_batches = (self.s.executed_batches + [batch])[-RECENT_BATCHES:]
        self._finished[batch.id] = batch
        self._refresh_details()
        await self._notify(batch)

    def _count(self, result: PushBatchOutput) -> None:
        stats = self.s.stats
        stats.total_batches += 1
        stats.pushes += result.pushes
        stats.total_execute_seconds += result.seconds
        stats.landed_ops += sum(1 for o in result.outcomes if o.status != OUTCOME_FAILED)
        stats.failed_ops += sum(1 for o in result.outcomes if o.status == OUTCOME_FAILED)
        batched_ops = stats.landed_ops + stats.failed_ops
        stats.avg_ops_per_batch = batched_ops / stats.total_batches
        stats.network_savings = max(batched_ops - stats.pushes, 0)

    async def _notify(self, batch: GitBatch) -> None:
        """Signal `git_ops_landed` to every op's `reply_to`; a vanished listener never blocks us."""
        by_listener: dict[str, list[OpOutcome]] = {}
        reply_to = {op.id: op.reply_to for op in batch.ops}
        for outcome in batch.outcomes:
            listener = reply_to.get(outcome.op_id)
            if listener:
                by_listener.setdefault(listener, []).append(outcome)
        for listener, outcomes in by_listener.items():
            message = GitOpsLanded(batch.id, self.config.repo, self.config.remote, outcomes)
            try:
                await workflow.get_external_workflow_handle(listener).signal(SIGNAL_GIT_OPS_LANDED, message)
            except Exception as err:  # noqa: BLE001 - the listener's absence is not our failure
                workflow.logger.warning("could not tell %s about %s: %s", listener, batch.id, err)

    # --- messages --------------------------------------------------------------------------------

    def _accept(self, op: GitOp) -> str:
        if not op.id:
            op.id = f"op-{self.s.next_op}"
            self.s.next_op += 1
        if op.id in self._seen:
            workflow.logger.info("op %s already accepted; ignoring the repeat", op.id)
            return op.id
        self._seen.add(op.id)
        self.s.recent_ids.append(op.id)
        if len(self.s.recent_ids) > 2 * RECENT_IDS:
            dropped, self.s.recent_ids = self.s.recent_ids[:-RECENT_IDS], self.s.recent_ids[-RECENT_IDS:]
            self._seen.difference_update(dropped)
        op.enqueued_at = workflow.now().isoformat()
        self.s.queue.append(op)
        self.s.stats.total_ops += 1
        self._refresh_details()
        return op.id

    def _reject(self, raw: Any, reason: str) -> None:
        workflow.logger.warning("rejected git op %r: %s", raw, reason)
        self.s.stats.rejected_ops += 1
        entry = RejectedOp(op=raw, reason=reason, at=workflow.now().isoformat())
        self.s.rejected = (self.s.rejected + [entry])[-RECENT_REJECTIONS:]
        self._refresh_details()

    @workflow.signal(name=SIGNAL_ENQUEUE)
    def enqueue(self, raw: Any) -> None:
        """Fire-and-forget; a bad op is recorded under `rejected` in `status`, never raised."""
        try:
            op = parse_git_op(raw)
        except InvalidGitOp as err:
            self._reject(raw, str(err))
            return
        self._accept(op)

    @workflow.signal(name=SIGNAL_FLUSH)
    def flush(self) -> None:
        self.s.flush_requested = True

    @workflow.update(name=UPDATE_SUBMIT)
    def submit(self, raw: Any) -> str:
        """Like `enqueue`, but the caller learns the op id, or why the op was refused."""
        return self._accept(parse_git_op(raw))

    @submit.validator
    def _validate_submit(self, raw: Any) -> None:
        # Rejected here, the bad op never enters history.
        try:
            parse_git_op(raw)
        except InvalidGitOp as err:
            raise ApplicationError(f"git op refused: {err}", type="InvalidGitOp", non_retryable=True) from None

    @workflow.update(name=UPDATE_FLUSH_NOW)
    async def flush_now(self) -> BatchResult:
        """An update rather than a signal because the caller waits for the push and its outcomes."""
        self.s.flush_requested = True
        cut = self._cut_batches()
        if not cut:
            return BatchResult(batch_id="", status="empty")
        return await self._wait_for(cut)

    @workflow.update(name=UPDATE_RETRY)
    async def retry(self, batch_id: str) -> BatchResult:
        batch = next(b for b in self.s.failed_batches if b.id == batch_id)
        self.s.failed_batches.remove(batch)
        batch.status = BATCH_PENDING
        self.s.pending_batches.append(batch)
        self._refresh_details()
        return await self._wait_for([batch])

    @retry.validator
    def _validate_retry(self, batch_id: str) -> None:
        if not any(b.id == batch_id for b in self.s.failed_batches):
            failed = ", ".join(b.id for b in self.s.failed_batches) or "none"
            raise ApplicationError(
                f"{batch_id!r} is not a failed batch (failed batches: {failed})",
                type="UnknownBatch",
                non_retryable=True,
            )

    async def _wait_for(self, batches: list[GitBatch]) -> BatchResult:
        ids = [b.id for b in batches]
        await workflow.wait_condition(lambda: all(i in self._finished for i in ids))
        done = [self._finished.pop(i) for i in ids]
        failed = [b for b in done if b.status == BATCH_FAILED]
        return BatchResult(
            batch_id=ids[-1],
            status=BATCH_FAILED if failed else BATCH_COMPLETED,
            outcomes=[o for b in done for o in b.outcomes],
            error="; ".join(f"{b.id}: {b.error}" for b in failed),
            batch_ids=ids,
        )

    @workflow.query(name=QUERY_STATUS)
    def status(self) -> GitBatchStatus:
        return GitBatchStatus(
            queue=self.s.queue,
            pending_batches=[b for b in self.s.pending_batches if b is not self._executing],
            executed_batches=self.s.executed_batches,
            failed_batches=self.s.failed_batches,
            rejected=self.s.rejected,
            config=self.config,
            stats=self.s.stats,
            executing=self._executing,
            runs=self.s.runs,
        )

    @workflow.query(name=QUERY_STATS)
    def stats(self) -> GitBatchStats:
        """Just the counters of `status`: cheap to ask often (a dashboard, a benchmark waiting)."""
        return self.s.stats

    def _refresh_details(self) -> None:
        last = self.s.executed_batches[-1] if self.s.executed_batches else None
        lines = [
            f"**{self.config.repo}** → `{self.config.remote}`",
            "",
            f"- queued ops: {len(self.s.queue)}",
            f"- pending batches: {len(self.s.pending_batches)}"
            + (f" (executing {self._executing.id})" if self._executing else ""),
            f"- failed batches: {len(self.s.failed_batches)}",
            f"- pushes: {self.s.stats.pushes}, ops landed: {self.s.stats.landed_ops}, "
            f"saved round trips: {self.s.stats.network_savings}",
            f"- rejected ops: {self.s.stats.rejected_ops}",
        ]
        if last:
            lines.append(f"- last batch: {last.id}, {len(last.ops)} ops, {last.status}")
        workflow.set_current_details("\n".join(lines))
