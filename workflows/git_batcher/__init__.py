"""`GitBatchWorkflow`: one per (clone, remote); queues git ops and lands each batch with one push.
The single writer for its remote: batches run one at a time, in order; the queue lives in
workflow state. Beside it: `intake.py` (a message to one op), `batches.py` (queue to batches, one
run each), `replies.py` (outcomes to senders, results updates wait on)."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ApplicationError

from taskfleet.workflows.compat import (
    git_batcher_continues_under_load,
    git_batcher_flush_covers_queued,
    git_batcher_replies_in_background,
    git_batcher_times_an_op_on_arrival,
)
from taskfleet.workflows.git_batcher.batches import Batches
from taskfleet.workflows.git_batcher.intake import (
    FLUSHES_WAITING,
    HELD_OPS_BYTES,
    MAX_OPS_PER_SIGNAL,
    REASON_CHARS,
    RECENT_IDS,
    RECENT_REJECTIONS,
    flush_after,
    parse_op,
    refusal_notice,
)
from taskfleet.workflows.git_batcher.replies import Replies
from taskfleet.workflows.long_lived import Inbox, continue_as_new_due, parse_start, refuse, show

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.bounded import args_problem, clip, describe_args
    from taskfleet.core.git_op_validation import InvalidGitOp, parse_config
    from taskfleet.core.models.git_batch import (
        BatchResult,
        GitBatchConfig,
        GitBatchState,
        GitBatchStats,
        GitBatchStatus,
        GitOp,
        RejectedOp,
    )
    from taskfleet.core.names import (
        CONTINUING_AS_NEW,
        GIT_BATCH_WORKFLOW,
        QUERY_STATS,
        QUERY_STATUS,
        SIGNAL_ENQUEUE,
        SIGNAL_FLUSH,
        UPDATE_FLUSH_NOW,
        UPDATE_RETRY,
        UPDATE_SUBMIT,
    )


# Worker Versioning: AUTO_UPGRADE. A batcher never ends (it continues as new), so pinned it would
# hold its first version forever; carried state is data, and new commands are guarded with
# `workflow.patched` (workflows/compat.py) so old histories still replay.
@workflow.defn(name=GIT_BATCH_WORKFLOW, versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class GitBatchWorkflow:
    @workflow.init
    def __init__(self, config: Any, state: Any = None) -> None:
        # Parsed here, not by the data converter: a bad field (typed by hand) would wedge the
        # workflow task.
        blank = lambda: GitBatchConfig(  # noqa: E731
            repo=str(config.get("repo", "")) if isinstance(config, dict) else "")
        self.config, self.s, self._config_error = parse_start(
            config, state, parse_config, blank, GitBatchState, InvalidGitOp)
        self._inbox = Inbox(self.s, RECENT_IDS, HELD_OPS_BYTES, "ops")
        self._draining = False
        self._replies = Replies(self.config.repo, self.config.remote)
        self._batches = Batches(self.config, self.s, self._inbox, self._replies,
                                self._refresh_details)
        # `flush({"after": ...})` calls whose ops are not all accepted yet (this run only).
        self._flushes_waiting: list[frozenset[str]] = []
        for op in self._held_ops():
            self._inbox.mark(op.id)
            self._inbox.hold(op.id, op)

    # --- run loop --------------------------------------------------------------------------------

    @workflow.run
    async def run(self, config: Any, state: Any = None) -> None:
        if self._config_error:
            raise ApplicationError(f"bad GitBatchWorkflow start input: {self._config_error}",
                                   non_retryable=True)
        workflow.logger.info("git batcher for %s (%s) run %d: %d queued, %d failed batches carried",
                             self.config.repo, self.config.remote, self.s.runs, len(self.s.queue),
                             len(self.s.failed_batches))
        self._refresh_details()
        batches = self._batches
        rearm_on_arrival = git_batcher_times_an_op_on_arrival()
        batches.in_background = git_batcher_replies_in_background()
        batches.flush_covers_queued = git_batcher_flush_covers_queued()
        if batches.flush_covers_queued and self.s.flush_requested and not self.s.flush_through:
            batches.request_flush()  # carried from a run that kept no extent: all it queued
        while True:
            due_in = batches.until_oldest_is_due()  # None: nothing queued, no timer
            try:
                await workflow.wait_condition(lambda: batches.flush_due() or bool(
                    self.s.pending_batches) or self._continue_due() or self._replies.pending or (
                        rearm_on_arrival and due_in is None and bool(self.s.queue)), timeout=due_in)
            except asyncio.TimeoutError:
                pass
            if self._replies.pending:
                await self._replies.send_notices()
            if self._continue_due() and git_batcher_continues_under_load():
                await self._drain_and_continue_as_new()
            if batches.flush_due():
                batches.cut()
            while self.s.pending_batches:
                if self._continue_due() and git_batcher_continues_under_load():
                    await self._drain_and_continue_as_new()
                await batches.execute(self.s.pending_batches[0])
            if self._continue_due():
                await self._replies.settle()
                # Updates (flush_now, retry) wait on batches this loop runs: run them until every
                # handler has returned, then hand the state to the next run.
                await workflow.wait_condition(
                    lambda: workflow.all_handlers_finished() or batches.flush_due()
                    or bool(self.s.pending_batches))
                if (workflow.all_handlers_finished() and not self.s.pending_batches
                        and not batches.flush_due()):
                    self.s.runs += 1
                    self.s.recent_ids = self.s.recent_ids[-RECENT_IDS:]
                    workflow.logger.info("continuing as new with %d queued ops", len(self.s.queue))
                    workflow.continue_as_new(args=[self.config, self.s])

    async def _drain_and_continue_as_new(self) -> None:
        """Finish the batches updates wait on, then carry the rest to a new run, refusing new
        `flush_now` and `retry` calls (clients resend), so this ends while ops keep arriving."""
        self._draining = True
        self._refresh_details()
        waits = self._batches.waits

        def awaited_pending() -> bool:
            return any(waits.awaited(b.id) for b in self.s.pending_batches)

        while True:
            # In order, up to the last batch an update waits on; later batches are carried.
            while awaited_pending():
                await self._batches.execute(self.s.pending_batches[0])
            await workflow.wait_condition(
                lambda: workflow.all_handlers_finished() or awaited_pending())
            if workflow.all_handlers_finished() and not awaited_pending():
                break
        await self._replies.settle()
        await self._replies.send_notices()
        self.s.runs += 1
        self._batches.compact_for_carry()
        workflow.logger.info("continuing as new with %d queued ops, %d failed batches",
                             len(self.s.queue), len(self.s.failed_batches))
        workflow.continue_as_new(args=[self.config, self.s])

    def _held_ops(self) -> list[GitOp]:
        return list(self.s.queue) + [op for b in self.s.pending_batches + self.s.failed_batches
                                     for op in b.ops]

    def _continue_due(self) -> bool:
        return continue_as_new_due(self.config.max_history_events)

    # --- messages --------------------------------------------------------------------------------

    def _accept(self, op: GitOp) -> str:
        if not op.id:
            op.id = f"op-{self.s.next_op}"
            self.s.next_op += 1
        if self._inbox.knows(op.id):
            workflow.logger.info("op %s already accepted; ignoring the repeat", op.id)
            return op.id
        self._inbox.remember(op.id)
        op.enqueued_at = workflow.now().isoformat()
        self._inbox.hold(op.id, op)
        self.s.queue.append(op)
        self.s.stats.total_ops += 1
        if self._flushes_waiting:
            waiting = [after for after in self._flushes_waiting
                       if not all(map(self._inbox.knows, after))]
            if len(waiting) < len(self._flushes_waiting):
                self._batches.request_flush()
            self._flushes_waiting = waiting
        self._refresh_details()
        return op.id

    def _reject(self, handler: str, args: tuple[Any, ...], reason: str) -> None:
        """Record a refused message as a bounded preview, never the raw payload."""
        self.s.stats.rejected_ops += 1
        self.s.rejected = refuse(self.s.rejected, RECENT_REJECTIONS, handler, args,
                                 clip(reason, REASON_CHARS), RejectedOp.refused)
        self._refresh_details()

    # Handlers take `*args`: the `temporal` CLI lets anyone send anything, and a fixed signature
    # would raise before our code runs (a raising signal handler wedges the batcher).

    @workflow.signal(name=SIGNAL_ENQUEUE)
    def enqueue(self, *args: Any) -> None:
        """Fire-and-forget; a bad op is recorded under `rejected` in `status`. One op or a list of
        up to MAX_OPS_PER_SIGNAL: a burst of single signals keeps a run from continuing as new."""
        if len(args) == 1 and isinstance(args[0], list):
            ops = args[0]
            if not ops or len(ops) > MAX_OPS_PER_SIGNAL:
                self._reject(SIGNAL_ENQUEUE, args,
                             f"a list of ops must hold 1 to {MAX_OPS_PER_SIGNAL} ops, this one "
                             f"holds {len(ops)}")
                return
            for raw in ops:
                self._enqueue_one((raw,))
            return
        self._enqueue_one(args)

    def _enqueue_one(self, args: tuple[Any, ...]) -> None:
        try:
            op = parse_op(args, self._inbox)
        except InvalidGitOp as err:
            self._reject(SIGNAL_ENQUEUE, args, str(err))
            notice = refusal_notice(args, clip(str(err), REASON_CHARS))
            if notice is not None:
                self._replies.add_notice(*notice)
            return
        try:
            self._accept(op)
        except Exception as err:  # noqa: BLE001
            self._reject(SIGNAL_ENQUEUE, args, f"could not accept the op ({type(err).__name__})")

    @workflow.signal(name=SIGNAL_FLUSH)
    def flush(self, *args: Any) -> None:
        """Flush now; with `{"after": [op ids]}`, once all those ops are accepted (a board's last
        tasks), in this run only. Any other input: flush now."""
        after = flush_after(args)
        if after is None or all(map(self._inbox.knows, after)):
            self._batches.request_flush()
            return
        self._flushes_waiting = (self._flushes_waiting + [after])[-FLUSHES_WAITING:]

    @workflow.update(name=UPDATE_SUBMIT)
    def submit(self, *args: Any) -> str:
        """Like `enqueue`, but the caller learns the op id, or why the op was refused."""
        try:
            return self._accept(parse_op(args, self._inbox))
        except InvalidGitOp as err:
            # The validator refused this already; only reached if state changed in between.
            raise ApplicationError(f"git op refused: {clip(str(err))}", type="InvalidGitOp",
                                   non_retryable=True) from None

    @submit.validator
    def _validate_submit(self, *args: Any) -> None:
        # Rejected here, the bad op never enters history.
        try:
            parse_op(args, self._inbox)
        except Exception as err:  # noqa: BLE001
            raise ApplicationError(f"git op refused: {clip(str(err))}", type="InvalidGitOp",
                                   non_retryable=True) from None

    @workflow.update(name=UPDATE_FLUSH_NOW)
    async def flush_now(self, *args: Any) -> BatchResult:
        """An update rather than a signal because the caller waits for the push and its outcomes;
        input is ignored."""
        self._batches.request_flush()
        cut = self._batches.cut()
        if not cut:
            return BatchResult(batch_id="", status="empty")
        return await self._batches.waits.wait_for(cut)

    @flush_now.validator
    def _validate_flush_now(self, *args: Any) -> None:
        self._refuse_while_draining(UPDATE_FLUSH_NOW)

    def _refuse_while_draining(self, name: str) -> None:
        if self._draining:
            raise ApplicationError(f"{name} refused: the batcher is continuing as new; send it "
                                   "again (it reaches the next run)", type=CONTINUING_AS_NEW,
                                   non_retryable=True)

    @workflow.update(name=UPDATE_RETRY)
    async def retry(self, *args: Any) -> BatchResult:
        batch_id = args[0] if len(args) == 1 else None
        batch = next((b for b in self.s.failed_batches if b.id == batch_id), None)
        if batch is None:
            raise ApplicationError(f"{clip(repr(batch_id), 80)} is not a failed batch",
                                   type="UnknownBatch", non_retryable=True)
        self._batches.retry(batch)
        return await self._batches.waits.wait_for([batch])

    @retry.validator
    def _validate_retry(self, *args: Any) -> None:
        self._refuse_while_draining(UPDATE_RETRY)
        problem = args_problem(args, "batch id (a string such as \"batch-3\")")
        if problem is None and not isinstance(args[0], str):
            problem = f"the batch id must be a string, got {clip(repr(describe_args(args)), 80)}"
        if problem is None and not any(b.id == args[0] for b in self.s.failed_batches):
            failed = ", ".join(b.id for b in self.s.failed_batches[:20]) or "none"
            problem = f"{clip(repr(args[0]), 80)} is not a failed batch (failed batches: {failed})"
        if problem:
            raise ApplicationError(problem, type="UnknownBatch", non_retryable=True)

    @workflow.query(name=QUERY_STATUS)
    def status(self) -> GitBatchStatus:
        executing = self._batches.executing
        return GitBatchStatus(
            queue=self.s.queue,
            pending_batches=[b for b in self.s.pending_batches if b is not executing],
            executed_batches=self.s.executed_batches, failed_batches=self.s.failed_batches,
            rejected=self.s.rejected, config=self.config, stats=self.s.stats, executing=executing,
            runs=self.s.runs)

    @workflow.query(name=QUERY_STATS)
    def stats(self) -> GitBatchStats:
        """Just the counters of `status`: cheap to ask often."""
        return self.s.stats

    def _refresh_details(self) -> None:
        last = self.s.executed_batches[-1] if self.s.executed_batches else None
        executing = self._batches.executing
        st = self.s.stats
        show(f"**{self.config.repo}** → `{self.config.remote}`",
             [f"- queued ops: {len(self.s.queue)}",
              f"- pending batches: {len(self.s.pending_batches)}"
              + (f" (executing {executing.id})" if executing else ""),
              f"- failed batches: {len(self.s.failed_batches)}",
              (f"- pushes: {st.pushes}, ops landed: {st.landed_ops}, "
               f"saved round trips: {st.network_savings}"),
              f"- rejected ops: {st.rejected_ops}",
              *([f"- last batch: {last.id}, {len(last.ops)} ops, {last.status}"] if last else [])],
             self._draining)
