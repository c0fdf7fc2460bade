"""`GitBatchWorkflow`: one per (clone, remote); queues git ops and lands each batch with one push.

It is the single writer for its remote: batches run one at a time, in order, so ops of one branch
land in the order they were accepted. Its queue lives in workflow state, so an accepted op survives
worker crashes and continue-as-new until it is landed or reported failed.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timedelta
from typing import Any, Optional

from taskfleet.workflows.activity_names import activity_name
from taskfleet.workflows.intake import ids_to_carry, parse_state, refusal, remember_id, should_continue_as_new
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.bounded import args_problem, clip, describe_args, json_size
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
    )
    from taskfleet.core.names import (
        ACTIVITY_PUSH_BATCH,
        CONTINUING_AS_NEW,
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
MAX_OPS_PER_SIGNAL = 500  # ops one `enqueue` signal may carry as a list
# Bounds of what one run carries into the next (serialized JSON), so the continue-as-new input stays
# far under the server's 2 MB payload limit whatever clients send: accepted ops still held (queued,
# pending, in failed batches) up to HELD_OPS_BYTES (new ops are refused past it, never dropped once
# accepted; one op is at most 64 KiB), plus at most CARRIED_EXECUTED_BYTES of compacted recent
# batches, CARRIED_REJECTED_BYTES of rejection previews and CARRIED_IDS_BYTES of recent op ids:
# about 1 MiB in the worst case. (A landing op is ~350 bytes: ~2,200 of them fit.)
HELD_OPS_BYTES = 768 * 1024
CARRIED_EXECUTED_BYTES = 64 * 1024
CARRIED_REJECTED_BYTES = 64 * 1024
CARRIED_IDS_BYTES = 96 * 1024
FAILED_BATCH_OVERHEAD = 2 * 1024
ERROR_CHARS = 1000
REASON_CHARS = 500
# Continue-as-new under load: finish the batch in flight and the updates waiting on batches, then
# carry the queue, instead of waiting for a moment with no flush due (which a stream never gives).
PATCH_CAN_UNDER_LOAD = "git-batcher-continue-as-new-under-load"
PUSH_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
    non_retryable_error_types=["InvalidRepository"],
)


def _compact_batch(batch: GitBatch) -> GitBatch:
    """A finished batch as the next run keeps it for `status`: ops reduced to what names them."""
    ops = [GitOp(op_type=op.op_type, branch=op.branch, id=op.id, target=op.target) for op in batch.ops]
    outcomes = [dataclasses.replace(o, reason=clip(o.reason, 200)) for o in batch.outcomes]
    return dataclasses.replace(batch, ops=ops, outcomes=outcomes, error=clip(batch.error, 300))


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
    def __init__(self, config: Any, state: Any = None) -> None:
        # The start input arrives as plain JSON (CLI users send it by hand), so it is parsed here
        # rather than by the data converter, which would wedge the workflow task on a bad field.
        self._config_error = ""
        try:
            self.config = parse_config(config)
        except InvalidGitOp as err:
            self._config_error = str(err)
            self.config = GitBatchConfig(repo=str((config or {}).get("repo", "")) if isinstance(config, dict) else "")
        # The carried state is parsed here too: a start with a bad second input fails the workflow
        # with a message instead of failing its first task forever.
        try:
            self.s = parse_state(state, GitBatchState)
        except Exception as err:  # noqa: BLE001
            self._config_error = self._config_error or f"bad carried state ({clip(str(err), 200)})"
            self.s = GitBatchState()
        self._seen = set(self.s.recent_ids)
        self._executing: Optional[GitBatch] = None
        # Results of batches that an update (flush_now, retry) waits on, by batch id; only those.
        self._awaited: dict[str, int] = {}
        self._finished: dict[str, BatchResult] = {}
        self._draining = False
        # Refused ops whose sender named a `reply_to`: told at once, so no caller waits for nothing.
        self._notices: list[tuple[str, OpOutcome]] = []
        self._op_bytes: dict[str, int] = {}
        self._held_bytes = 0
        for op in self._held_ops():
            self._seen.add(op.id)
            self._hold(op)
        self._held_bytes += FAILED_BATCH_OVERHEAD * len(self.s.failed_batches)

    # --- run loop --------------------------------------------------------------------------------

    @workflow.run
    async def run(self, config: Any, state: Any = None) -> None:
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
                    lambda: self._flush_due()
                    or bool(self.s.pending_batches)
                    or self._should_continue_as_new()
                    or bool(self._notices),
                    timeout=self._until_oldest_is_due(),
                )
            except asyncio.TimeoutError:
                pass
            if self._notices:
                await self._send_notices()
            if self._should_continue_as_new() and self._continue_under_load():
                await self._drain_and_continue_as_new()
            if self._flush_due():
                self._cut_batches()
            while self.s.pending_batches:
                if self._should_continue_as_new() and self._continue_under_load():
                    await self._drain_and_continue_as_new()
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

    def _continue_under_load(self) -> bool:
        # Histories recorded before this change waited for a moment with no flush due.
        return workflow.patched(PATCH_CAN_UNDER_LOAD)

    async def _drain_and_continue_as_new(self) -> None:
        """Finish the batches that updates wait on, then carry the queue and the other batches to a
        new run (the batch in flight, if any, has finished: this runs between batches).

        New `flush_now`/`retry` calls are refused meanwhile (type ContinuingAsNew; clients send them
        again and reach the next run), so this ends even while ops keep arriving.
        """
        self._draining = True
        self._refresh_details()

        def awaited_pending() -> bool:
            return any(b.id in self._awaited for b in self.s.pending_batches)

        while True:
            # In order, up to the last batch an update waits on; later batches are carried.
            while awaited_pending():
                await self._execute(self.s.pending_batches[0])
            await workflow.wait_condition(lambda: workflow.all_handlers_finished() or awaited_pending())
            if workflow.all_handlers_finished() and not awaited_pending():
                break
        await self._send_notices()
        self.s.runs += 1
        self._compact_for_carry()
        workflow.logger.info(
            "continuing as new with %d queued ops, %d failed batches", len(self.s.queue), len(self.s.failed_batches)
        )
        workflow.continue_as_new(args=[self.config, self.s])

    def _compact_for_carry(self) -> None:
        """Shrink what the next run gets to the bounds above; nothing accepted and unfinished is cut."""
        s = self.s
        executed = [_compact_batch(b) for b in s.executed_batches[-RECENT_BATCHES:]]
        while executed and json_size(executed) > CARRIED_EXECUTED_BYTES:
            executed.pop(0)
        s.executed_batches = executed
        for batch in s.failed_batches:
            # Every op's outcome only repeats the batch's error; the error itself is kept.
            batch.outcomes = []
            batch.error = clip(batch.error, ERROR_CHARS)
        while s.rejected and json_size(s.rejected) > CARRIED_REJECTED_BYTES:
            s.rejected.pop(0)
        s.recent_ids = ids_to_carry(s.recent_ids, RECENT_IDS, CARRIED_IDS_BYTES)

    def _held_ops(self) -> list[GitOp]:
        ops = list(self.s.queue)
        for batch in self.s.pending_batches + self.s.failed_batches:
            ops.extend(batch.ops)
        return ops

    def _hold(self, op: GitOp) -> None:
        size = json_size(op)
        self._op_bytes[op.id] = size
        self._held_bytes += size

    def _release(self, ops: list[GitOp]) -> None:
        for op in ops:
            self._held_bytes -= self._op_bytes.pop(op.id, 0)

    def _room_problem(self, op: GitOp) -> Optional[str]:
        """Why the batcher cannot hold one more op right now (its carried state is full), or None."""
        if op.id and op.id in self._seen:
            return None  # a repeat costs nothing
        size = json_size(op)
        if self._held_bytes + size > HELD_OPS_BYTES:
            return (
                f"the batcher holds {self._held_bytes // 1024} KiB of unfinished ops (limit "
                f"{HELD_OPS_BYTES // 1024} KiB): send again once queued batches have landed"
            )
        return None

    def _should_continue_as_new(self) -> bool:
        return should_continue_as_new(self.config.max_history_events)

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
            self._held_bytes -= FAILED_BATCH_OVERHEAD * len(self.s.failed_batches)
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
            batch.error = clip(root_cause_message(err), ERROR_CHARS)
            short = clip(batch.error, REASON_CHARS)
            batch.outcomes = [
                OpOutcome(op.id, op.op_type, op.branch, OUTCOME_FAILED, reason=f"batch failed: {short}")
                for op in batch.ops
            ]
            # Every op of a failed batch failed this time (the batch is kept and retried later).
            self.s.stats.failed_ops += len(batch.ops)
            workflow.logger.warning("%s failed, kept for retry: %s", batch.id, batch.error)
        else:
            batch.status = BATCH_COMPLETED
            batch.error = ""
            for outcome in result.outcomes:
                outcome.reason = clip(outcome.reason, REASON_CHARS)
            batch.outcomes = result.outcomes
            batch.execute_seconds = result.seconds
            self._count(result)
        finally:
            self._executing = None
        self.s.pending_batches.remove(batch)
        if batch.status == BATCH_FAILED:
            self.s.failed_batches.append(batch)
            self._held_bytes += FAILED_BATCH_OVERHEAD
        else:
            self._release(batch.ops)
            self.s.executed_batches = (self.s.executed_batches + [batch])[-RECENT_BATCHES:]
        if batch.id in self._awaited:
            self._finished[batch.id] = BatchResult(
                batch_id=batch.id,
                status=batch.status,
                outcomes=list(batch.outcomes),
                error=f"{batch.id}: {batch.error}" if batch.status == BATCH_FAILED else "",
                batch_ids=[batch.id],
            )
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

    async def _send_notices(self) -> None:
        while self._notices:
            notices, self._notices = self._notices, []
            by_listener: dict[str, list[OpOutcome]] = {}
            for listener, outcome in notices:
                by_listener.setdefault(listener, []).append(outcome)
            await self._signal_outcomes("", by_listener)

    def _notice_refusal(self, args: tuple[Any, ...], reason: str) -> None:
        """A refused op that names `reply_to` and `id` gets a `failed` outcome sent to its sender."""
        raw = args[0] if len(args) == 1 else None
        if not isinstance(raw, dict):
            return
        listener, op_id = raw.get("reply_to"), raw.get("id")
        if not (isinstance(listener, str) and isinstance(op_id, str) and 0 < len(listener) <= 1000 and 0 < len(op_id) <= 200):
            return
        op_type, branch = raw.get("op_type"), raw.get("branch")
        outcome = OpOutcome(
            op_id=op_id,
            op_type=op_type if isinstance(op_type, str) and len(op_type) < 20 else "",
            branch=branch if isinstance(branch, str) and len(branch) <= 255 else "",
            status=OUTCOME_FAILED,
            reason=f"refused by the git batcher: {reason}",
        )
        self._notices.append((listener, outcome))

    async def _notify(self, batch: GitBatch) -> None:
        """Signal `git_ops_landed` to every op's `reply_to`; a vanished listener never blocks us."""
        by_listener: dict[str, list[OpOutcome]] = {}
        reply_to = {op.id: op.reply_to for op in batch.ops}
        for outcome in batch.outcomes:
            listener = reply_to.get(outcome.op_id)
            if listener:
                by_listener.setdefault(listener, []).append(outcome)
        await self._signal_outcomes(batch.id, by_listener)

    async def _signal_outcomes(self, batch_id: str, by_listener: dict[str, list[OpOutcome]]) -> None:
        for listener, outcomes in by_listener.items():
            message = GitOpsLanded(batch_id, self.config.repo, self.config.remote, outcomes)
            try:
                await workflow.get_external_workflow_handle(listener).signal(SIGNAL_GIT_OPS_LANDED, message)
            except Exception as err:  # noqa: BLE001 - the listener's absence is not our failure
                workflow.logger.warning("could not tell %s about %s: %s", listener, batch_id or "a refused op", err)

    # --- messages --------------------------------------------------------------------------------

    def _accept(self, op: GitOp) -> str:
        if not op.id:
            op.id = f"op-{self.s.next_op}"
            self.s.next_op += 1
        if op.id in self._seen:
            workflow.logger.info("op %s already accepted; ignoring the repeat", op.id)
            return op.id
        self.s.recent_ids = remember_id(self.s.recent_ids, self._seen, op.id, RECENT_IDS)
        op.enqueued_at = workflow.now().isoformat()
        self._hold(op)
        self.s.queue.append(op)
        self.s.stats.total_ops += 1
        self._refresh_details()
        return op.id

    def _reject(self, handler: str, args: tuple[Any, ...], reason: str) -> None:
        """Record a refused message as a bounded preview: never the raw payload, whatever its size."""
        self.s.stats.rejected_ops += 1
        self.s.rejected = refusal(handler, args, clip(reason, REASON_CHARS), self.s.rejected, RECENT_REJECTIONS)
        self._refresh_details()

    def _parse_op(self, args: tuple[Any, ...]) -> GitOp:
        """The one git op in a message's arguments, or InvalidGitOp saying what is wrong with them."""
        problem = args_problem(args, "git op (a JSON object)")
        if problem:
            raise InvalidGitOp(problem)
        try:
            op = parse_git_op(args[0])
        except InvalidGitOp:
            raise
        except Exception as err:  # noqa: BLE001 - nothing a client sends may escape a handler
            raise InvalidGitOp(f"unreadable git op ({type(err).__name__})") from None
        room = self._room_problem(op)
        if room:
            raise InvalidGitOp(room)
        return op

    # Handlers take `*args`: the `temporal` CLI lets anyone send no input, two inputs or anything
    # else, and a fixed signature would raise before our code runs (a signal handler that raises
    # fails the workflow task forever: the batcher would be wedged).

    @workflow.signal(name=SIGNAL_ENQUEUE)
    def enqueue(self, *args: Any) -> None:
        """Fire-and-forget; a bad op is recorded under `rejected` in `status`, never raised.

        One op, or a list of up to MAX_OPS_PER_SIGNAL ops (each taken or refused on its own): every
        signal is a history event, and a burst of separate signals faster than the worker takes them
        keeps the server from closing a run (continue-as-new) while new ones are pending, so clients
        send what they hold together (GitBatcherClient does)."""
        if len(args) == 1 and isinstance(args[0], list):
            ops = args[0]
            if not ops or len(ops) > MAX_OPS_PER_SIGNAL:
                self._reject(SIGNAL_ENQUEUE, args, f"a list of ops must hold 1 to {MAX_OPS_PER_SIGNAL} ops, "
                                                   f"this one holds {len(ops)}")
                return
            for raw in ops:
                self._enqueue_one((raw,))
            return
        self._enqueue_one(args)

    def _enqueue_one(self, args: tuple[Any, ...]) -> None:
        try:
            op = self._parse_op(args)
        except InvalidGitOp as err:
            self._reject(SIGNAL_ENQUEUE, args, str(err))
            self._notice_refusal(args, clip(str(err), REASON_CHARS))
            return
        try:
            self._accept(op)
        except Exception as err:  # noqa: BLE001
            self._reject(SIGNAL_ENQUEUE, args, f"could not accept the op ({type(err).__name__})")

    @workflow.signal(name=SIGNAL_FLUSH)
    def flush(self, *args: Any) -> None:
        """Flush now; any input sent with it is ignored."""
        self.s.flush_requested = True

    @workflow.update(name=UPDATE_SUBMIT)
    def submit(self, *args: Any) -> str:
        """Like `enqueue`, but the caller learns the op id, or why the op was refused."""
        try:
            return self._accept(self._parse_op(args))
        except InvalidGitOp as err:
            # The validator refused this already; only reached if state changed in between.
            raise ApplicationError(f"git op refused: {clip(str(err))}", type="InvalidGitOp", non_retryable=True) from None

    @submit.validator
    def _validate_submit(self, *args: Any) -> None:
        # Rejected here, the bad op never enters history.
        try:
            self._parse_op(args)
        except Exception as err:  # noqa: BLE001
            raise ApplicationError(f"git op refused: {clip(str(err))}", type="InvalidGitOp", non_retryable=True) from None

    @workflow.update(name=UPDATE_FLUSH_NOW)
    async def flush_now(self, *args: Any) -> BatchResult:
        """An update rather than a signal because the caller waits for the push and its outcomes.
        Any input sent with it is ignored."""
        self.s.flush_requested = True
        cut = self._cut_batches()
        if not cut:
            return BatchResult(batch_id="", status="empty")
        return await self._wait_for(cut)

    @flush_now.validator
    def _validate_flush_now(self, *args: Any) -> None:
        self._refuse_while_draining(UPDATE_FLUSH_NOW)

    def _refuse_while_draining(self, name: str) -> None:
        if self._draining:
            raise ApplicationError(
                f"{name} refused: the batcher is continuing as new; send it again (it reaches the next run)",
                type=CONTINUING_AS_NEW,
                non_retryable=True,
            )

    @workflow.update(name=UPDATE_RETRY)
    async def retry(self, *args: Any) -> BatchResult:
        batch_id = args[0] if len(args) == 1 else None
        batch = next((b for b in self.s.failed_batches if b.id == batch_id), None)
        if batch is None:
            raise ApplicationError(f"{clip(repr(batch_id), 80)} is not a failed batch", type="UnknownBatch", non_retryable=True)
        self.s.failed_batches.remove(batch)
        self._held_bytes -= FAILED_BATCH_OVERHEAD
        batch.status = BATCH_PENDING
        self.s.pending_batches.append(batch)
        self._refresh_details()
        return await self._wait_for([batch])

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

    async def _wait_for(self, batches: list[GitBatch]) -> BatchResult:
        """The fate of these batches' next run: only a run that ends after this call counts."""
        ids = [b.id for b in batches]
        for i in ids:
            self._finished.pop(i, None)
            self._awaited[i] = self._awaited.get(i, 0) + 1
        try:
            await workflow.wait_condition(lambda: all(i in self._finished for i in ids))
        finally:
            for i in ids:
                self._awaited[i] -= 1
                if not self._awaited[i]:
                    del self._awaited[i]
        done = [self._finished[i] if i in self._awaited else self._finished.pop(i) for i in ids]
        failed = [r for r in done if r.status == BATCH_FAILED]
        return BatchResult(
            batch_id=ids[-1],
            status=BATCH_FAILED if failed else BATCH_COMPLETED,
            outcomes=[o for r in done for o in r.outcomes],
            error="; ".join(r.error for r in failed),
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
        if self._draining:
            lines.append("- continuing as new")
        if last:
            lines.append(f"- last batch: {last.id}, {len(last.ops)} ops, {last.status}")
        workflow.set_current_details("\n".join(lines))
