"""`LLMTaskWorkflow`: one `implementer = "anthropic"` task of an orchestrator run, as a child.
prepare -> model (a Message Batch or a direct call) -> apply, verify, commit -> judge, if any ->
land; a fix or revise round on failure. Payloads stay in the payload store; waiting for a batch is a
`wait_condition` (no slot, thread or worktree held). Returns `taskfleet_run_task`'s `TaskResult`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Optional

from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.boards import has_judge
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.models.judge import JudgeRequest, LandInput, judged_task
    from taskfleet.core.models.llm import (
        REPLY_SUCCEEDED,
        ApplyInput,
        FailureInput,
        LLMReply,
        LLMTaskInput,
        PreparedRequest,
    )
    from taskfleet.core.models.orchestrator import (
        TASK_FAILED,
        TASK_SUCCEEDED,
        TaskInput,
        TaskResult,
    )
    from taskfleet.core.models.payload import compact
    from taskfleet.core.models.review import (
        STAGE_IMPLEMENTING,
        STAGE_JUDGING,
        STAGE_LANDING,
        STAGE_VERIFYING,
        VERDICT_APPROVE,
        VERDICT_REJECT,
        JudgeTally,
    )
    from taskfleet.core.names import (
        ACTIVITY_LLM_APPLY,
        ACTIVITY_LLM_PREPARE,
        ACTIVITY_LLM_RECORD_FAILURE,
        LLM_TASK_WORKFLOW,
        SIGNAL_LLM_REPLY,
    )
    from taskfleet.core.review_schema import reasons_line, review_text

from taskfleet.workflows.compat import llm_task_reports_stages
from taskfleet.workflows.judge.ask import add_judging, judge, land, report_stage, with_judging
from taskfleet.workflows.llm.calls import (
    QUICK,
    Conversation,
    ModelCalls,
    Route,
    called,
    tool_call,
)

TOOL = "apply_edits"
TOOL_RESULT_TAIL = 3000
# Verification heartbeats every second; a worker that vanishes is noticed within this.
APPLY_HEARTBEAT = timedelta(seconds=60)


@dataclass
class Kept:
    """An attempt's edits as the judge may keep them: by reference (`answer`), or inline from before
    the payload store; `cache_key` "" for edits that came from the cache."""

    cache_key: str
    answer: Any
    edits: Any
    summary: str


# Worker Versioning: PINNED, like its orchestrator: a task's steps run on the version they began on.
@workflow.defn(name=LLM_TASK_WORKFLOW, versioning_behavior=VersioningBehavior.PINNED)
class LLMTaskWorkflow:
    def __init__(self) -> None:
        self.calls = ModelCalls()
        self.judging = JudgeTally()
        self.verdict = ""
        self.rounds = 0  # judgings so far
        self.reviewed_commit = ""  # the commit the judge last sent back
        self._stages = False
        self.by_claude = True
        self._last_review: Any = None
        self.stored = False
        self.task_ref: Any = None

    @workflow.signal(name=SIGNAL_LLM_REPLY)
    def llm_reply(self, *args: Any) -> None:
        """The batcher's answer; a repeat (a retried delivery) or anything malformed is dropped."""
        self.calls.receive(args)

    @workflow.run
    async def run(self, params: LLMTaskInput) -> TaskResult:
        task_input = params.task_input
        task = task_input.task
        judged = has_judge(task)
        # A task with a judge commits, then waits for the verdict before it lands.
        apply_input = replace(task_input, hold_landing=True) if judged else task_input
        self.result = TaskResult(id=task.id, status=TASK_FAILED)
        # A stored run reports its stages (it began after they were): no patch marker to record.
        self._stages = True if params.stored else llm_task_reports_stages()
        self.by_claude = not task.judge_run.strip()
        self.stored = params.stored
        prepared = await self._prepare(params)
        self.task_ref = prepared.task if self.stored else None
        self.model = prepared.model or str(prepared.params.get("model", ""))
        talk = Conversation(prepared.request, prepared.params)
        from_cache = prepared.cached is not None or prepared.cached_edits is not None
        attempt = 0
        last = TaskResult(id=task.id, status=TASK_FAILED, reason="no attempt made")
        while True:
            reply: Optional[LLMReply] = None
            tool_id: Optional[str] = None
            if from_cache:
                answer, edits = prepared.cached, prepared.cached_edits
                summary = prepared.cached_summary
            else:
                if attempt >= task.max_attempts:
                    break
                attempt += 1
                if attempt > 1:  # the orchestrator shows the first attempt as implementing itself
                    await self._stage(task_input, STAGE_IMPLEMENTING)
                reply = await self._ask(params, talk, attempt, prepared.submitted and attempt == 1)
                self._account(reply)
                if reply.type != REPLY_SUCCEEDED:
                    last = self._failed(f"attempt {attempt}: the API reported {reply.type}: "
                                        f"{reply.error}", f"llm_{reply.type}")
                    await self._record(task_input, last)
                    continue
                tool_id = called(reply, TOOL)
                # A reply from before the payload store holds the edits itself.
                inline = tool_call(reply.message, TOOL) if reply.message else None
                if tool_id is None or (inline and not isinstance(inline.get("input"), dict)):
                    last = self._failed(f"attempt {attempt}: the model did not call apply_edits",
                                        "llm_no_tool")
                    await self._record(task_input, last)
                    talk.add_reply(reply)
                    talk.add_user({"type": "text", "text": "Call apply_edits with the edits."})
                    continue
                answer, edits, summary = reply.message_ref, None, ""
                if inline is not None:
                    edits = inline["input"].get("edits")
                    summary = str(inline["input"].get("summary", ""))[:1000]
            if self.task_ref is None:  # else the apply step says so itself
                await self._stage(task_input, STAGE_VERIFYING)
            applied: TaskResult = await workflow.execute_activity(
                ACTIVITY_LLM_APPLY,
                compact(ApplyInput(
                    task_input=apply_input if self.task_ref is None else None, edits=edits,
                    summary=summary, attempt=attempt, cache_key=prepared.cache_key,
                    from_cache=from_cache, reviewed_commit=self.reviewed_commit, answer=answer,
                    task=self.task_ref, hold_landing=judged, report_stages=self._stages)),
                result_type=TaskResult,
                start_to_close_timeout=timedelta(seconds=2 * task.timeout_seconds + 120),
                heartbeat_timeout=APPLY_HEARTBEAT, retry_policy=QUICK,
                summary=(f"{task.id}: apply edits, verify, commit"
                         + ("" if judged else ", land"))[:100],
            )
            applied.prompt_hash = prepared.prompt_hash
            if applied.status == TASK_SUCCEEDED and judged:
                kept = Kept(prepared.cache_key if not from_cache else "", answer, edits, summary)
                feedback = await self._judge(task_input, applied, attempt, kept)
                if feedback is None:  # approved and landed, or the task failed for good
                    return self._merged(applied)
                if from_cache:
                    from_cache = False  # the cached edits fail the judge: ask the model
                    last = applied
                    continue
                last = applied
                if attempt >= task.max_attempts:
                    applied.status, applied.failure_type = TASK_FAILED, "judge_revise"
                    applied.reason = (
                        f"the judge still asks for changes after {attempt} attempt(s) "
                        f"(max_attempts {task.max_attempts}): {reasons_line(self._last_review)}")
                    break
                # Revise round: the judge's review as the result of the model's last edits.
                assert reply is not None
                talk.add_reply(reply)
                talk.tool_result(tool_id, feedback)
                continue
            if applied.status == TASK_SUCCEEDED:
                return self._merged(applied)
            if from_cache:
                from_cache = False  # the stored edits no longer pass: ask the model after all
                last = applied
                continue
            applied.reason = f"attempt {attempt}: {applied.reason}"
            last = applied
            if reply is not None and attempt < task.max_attempts:
                # Fix round: why the edits failed, as an error tool result.
                feedback = applied.reason
                if applied.output_tail:
                    feedback += ("\n\nOutput of the verify command (tail):\n"
                                 f"{applied.output_tail[-TOOL_RESULT_TAIL:]}")
                talk.add_reply(reply)
                talk.tool_result(tool_id, feedback)
        return self._merged(last)

    async def _judge(self, task_input: TaskInput, applied: TaskResult, attempt: int,
                     kept: Kept) -> Optional[str]:
        """Ask the judge about the applied commit. Approve: land it (None). Reject or no verdict:
        `applied` becomes the task's failure (None). Revise: the feedback for the next attempt."""
        self.rounds += 1
        by_stored_judge = self.task_ref is not None and not task_input.task.judge_run.strip()
        if not by_stored_judge:  # else the judge's prepare step says so itself
            await self._stage(task_input, STAGE_JUDGING)
        by_ref = kept.cache_key if kept.answer is not None else ""
        request = JudgeRequest(task_input=task_input, commit=applied.commit,
                               verify_tail=applied.output_tail, round=self.rounds, attempt=attempt,
                               edits_cache_key=by_ref, edits=kept.answer if by_ref else None)
        if by_stored_judge:
            # The judge reads the stored task; the verify output from its command on.
            tail = applied.output_tail
            request = replace(request, task_input=None, task=self.task_ref,
                              about=judged_task(request), stored=True, report_stage=True,
                              verify_tail=tail[max(tail.rfind("$ (verify) "), 0):])
        outcome = await judge(request)
        add_judging(self.judging, outcome)
        review = outcome.review
        if review is None:
            applied.status, applied.failure_type, applied.reason = (
                TASK_FAILED, "judge_failed", f"judge: {outcome.error}")
            return None
        self.verdict, self._last_review = review.verdict, review
        if review.verdict == VERDICT_APPROVE:
            # Stored: lands locally, ends at once and shows as waiting to land: no `landing` stage.
            if not self.stored:
                await self._stage(task_input, STAGE_LANDING)
            inline = kept.cache_key if kept.answer is None else ""  # else the judge kept them
            landing = LandInput(task_input=task_input, commit=applied.commit,
                                edits_cache_key=inline, edits=kept.edits, summary=kept.summary)
            applied.landing_op_id = await land(landing, local=self.stored)
            return None
        if review.verdict == VERDICT_REJECT:
            applied.status, applied.failure_type = TASK_FAILED, "judge_rejected"
            applied.reason = f"rejected by the judge: {reasons_line(review)}"
            return None
        self.reviewed_commit = applied.commit
        await self._stage(task_input, STAGE_JUDGING)  # carries the verdict
        return ("Your edits passed verification, but the judge asks for changes. Send corrected "
                f"edits (they apply to the original base again):\n{review_text(review)}")

    async def _stage(self, task_input: TaskInput, stage: str) -> None:
        if self._stages:
            await report_stage(task_input, stage, self.verdict)

    async def _prepare(self, params: LLMTaskInput) -> PreparedRequest:
        """The request, prepared and stored. A stored run prepares in a local activity (no round
        trip, no copy of the task's input in history) that also stores the input and submits."""
        task_input = params.task_input
        if not params.stored:
            return await workflow.execute_activity(
                ACTIVITY_LLM_PREPARE, task_input, result_type=PreparedRequest,
                start_to_close_timeout=timedelta(minutes=5), retry_policy=QUICK,
            )
        task = task_input.task
        submit = self.calls.submit_input(task.id, 1, _route(task)) if task.llm_batch else None
        return await workflow.execute_local_activity(
            ACTIVITY_LLM_PREPARE, args=[task_input, submit], result_type=PreparedRequest,
            start_to_close_timeout=timedelta(minutes=5), retry_policy=QUICK,
            summary=f"{task.id}: prepare the request"[:100],
        )

    async def _ask(self, params: LLMTaskInput, talk: Conversation, attempt: int,
                   submitted: bool) -> LLMReply:
        task = params.task_input.task
        return await self.calls.ask(talk.request(), self.model, task.id, attempt, _route(task),
                                    task.id, submitted)

    def _account(self, reply: LLMReply) -> None:
        self.calls.account(reply, self.model)

    def _failed(self, reason: str, failure_type: str) -> TaskResult:
        return TaskResult(id=self.result.id, status=TASK_FAILED, reason=reason,
                          failure_type=failure_type)

    async def _record(self, task_input: Any, failed: TaskResult) -> None:
        try:
            await workflow.execute_activity(
                ACTIVITY_LLM_RECORD_FAILURE,
                FailureInput(task_input=task_input, failure_type=failed.failure_type,
                             reason=failed.reason),
                start_to_close_timeout=timedelta(minutes=1),
                retry_policy=RetryPolicy(maximum_attempts=3),
            )
        except ActivityError as err:
            workflow.logger.warning("could not record a lesson: %s", root_cause_message(err))

    def _merged(self, outcome: TaskResult) -> Any:
        """The attempt's result, with the accounting of every call this task made (compact: the
        orchestrator's `TaskResult` fills in what is left at its default)."""
        u = self.calls.usage
        outcome.llm_direct_calls, outcome.llm_batch_ids, outcome.llm_requests = (
            u.direct_calls, list(u.batch_ids), u.requests)
        outcome.llm_input_tokens, outcome.llm_output_tokens = u.input_tokens, u.output_tokens
        outcome.llm_cache_read_tokens, outcome.llm_cost_usd = u.cache_read_tokens, u.cost_usd
        if self.rounds:
            with_judging(outcome, self.judging, self.verdict, self.by_claude)
        if self.stored:
            outcome.output_tail = ""  # the log holds it (`log_path`); the orchestrator reads none
            for name in ("seconds", "exec_seconds", "verify_seconds", "setup_seconds",
                         "wait_seconds"):
                setattr(outcome, name, round(getattr(outcome, name), 3))
        return compact(outcome)


def _route(task: Any) -> Route:
    return Route(batch=task.llm_batch, max_batch_size=task.llm_batch_max_size,
                 max_batch_age_seconds=task.llm_batch_max_age_seconds)
