"""`JudgeWorkflow`: a Claude judge's verdict on one commit of one task, as a child of the workflow
that runs the task. prepare (a result-cache hit ends here) -> the model, through the implementer's
plumbing (a Message Batch, or one direct call) -> the stored answer checked against `submit_review`
(kept in the result cache, and as a lesson unless approve); a bad answer gets one retry."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Optional

from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.models.judge import (
        JUDGE_BY_CLAUDE,
        JudgeAnswer,
        JudgeOutcome,
        JudgeRecord,
        JudgeRequest,
        JudgeStatus,
        JudgeVerdict,
        PreparedJudge,
        judged_task,
    )
    from taskfleet.core.models.llm import REPLY_SUCCEEDED
    from taskfleet.core.models.payload import compact
    from taskfleet.core.models.review import (
        VERDICT_APPROVE,
        VERDICT_REJECT,
        VERDICT_REVISE,
        JudgeTally,
    )
    from taskfleet.core.names import (
        ACTIVITY_JUDGE_PREPARE,
        ACTIVITY_JUDGE_RECORD,
        ACTIVITY_JUDGE_VERDICT,
        JUDGE_WORKFLOW,
        QUERY_STATUS,
        SIGNAL_LLM_REPLY,
    )
    from taskfleet.core.review_schema import ReviewInvalid, parse_review

from taskfleet.workflows.llm.calls import (
    QUICK,
    Conversation,
    ModelCalls,
    Route,
    called,
    tool_call,
)

TOOL = "submit_review"
ANSWERS = 2  # the first answer, then one retry after an answer that broke the schema


# Worker Versioning: PINNED, like the task workflow that starts it: one judging runs on one version.
@workflow.defn(name=JUDGE_WORKFLOW, versioning_behavior=VersioningBehavior.PINNED)
class JudgeWorkflow:
    def __init__(self) -> None:
        self.calls = ModelCalls()
        self.tally = JudgeTally()
        self.stage = "preparing"
        self.answers = 0
        self.problem = ""
        self._title = "**judge**"

    @workflow.signal(name=SIGNAL_LLM_REPLY)
    def llm_reply(self, *args: Any) -> None:
        """The batcher's answer; malformed or repeated replies are dropped."""
        self.calls.receive(args)

    @workflow.query(name=QUERY_STATUS)
    def status(self) -> JudgeStatus:
        return JudgeStatus(stage=self.stage, answers=self.answers, problem=self.problem,
                           tally=self._tally())

    @workflow.run
    async def run(self, request: JudgeRequest) -> JudgeOutcome:
        task = judged_task(request)
        self._title = (f"**judge** of {task.id}, round {request.round}: "
                       f"commit `{request.commit[:12]}`")
        self._details()
        route = Route(batch=task.llm_batch, max_batch_size=task.llm_batch_max_size,
                      max_batch_age_seconds=task.llm_batch_max_age_seconds)
        # Stored: a local activity prepares and submits: no round trip, no task input in history.
        stored, name = request.stored, f"{task.id}-judge"
        submit = self.calls.submit_input(name, 1, route) if stored and route.batch else None
        run = workflow.execute_local_activity if stored else workflow.execute_activity
        try:
            prepared: PreparedJudge = await run(
                ACTIVITY_JUDGE_PREPARE, args=[request, submit] if stored else [request],
                result_type=PreparedJudge, start_to_close_timeout=timedelta(minutes=5),
                retry_policy=QUICK,
                summary=f"{task.id}: the judge's request (diff, verify output, lessons)"[:100],
            )
        except ActivityError as err:
            return self._done(
                error=f"the judge's request could not be made: {root_cause_message(err)}")
        if prepared.cached is not None:
            self.tally.cache_hits = 1
            return self._done(review=prepared.cached, cache_hit=True)
        model = prepared.model or str(prepared.params.get("model", ""))
        talk = Conversation(prepared.request, prepared.params)
        for attempt in range(1, ANSWERS + 1):
            self.stage, self.answers = ("asking" if attempt == 1 else "retrying"), attempt
            self._details()
            reply = await self.calls.ask(talk.request(), model, f"{task.id}-judge", attempt, route,
                                         f"{task.id}: judge", prepared.submitted and attempt == 1)
            self.calls.account(reply, model)
            if reply.type != REPLY_SUCCEEDED:
                return self._done(error="the judge's request failed: the API reported "
                                        f"{reply.type}: {reply.error}")
            verdict = await self._verdict(request, prepared, reply)
            if verdict is None:
                return self._done(error=f"the judge's answer could not be read: {self.problem}")
            if verdict.review is None:
                self.tally.invalid += 1
                self.problem = verdict.problem
                workflow.logger.warning("%s: the judge's answer %d broke the schema: %s", task.id,
                                        attempt, verdict.problem)
                talk.add_reply(reply)
                talk.tool_result(called(reply, TOOL), "Your answer does not fit submit_review: "
                                 f"{verdict.problem}. Call submit_review again.")
                continue
            return self._done(review=verdict.review)
        return self._done(
            error=f"the judge's answer broke submit_review's schema twice: {self.problem}")

    async def _verdict(self, request: JudgeRequest, prepared: PreparedJudge,
                       reply: Any) -> Optional[JudgeVerdict]:
        """The answer's review, kept by an activity (an inline reply from before the store: read
        here, kept by `taskfleet_judge_record`); None if the stored reply is unreadable."""
        task = judged_task(request)
        if reply.message_ref is None:
            tool = tool_call(reply.message, TOOL)
            try:
                if tool is None:
                    raise ReviewInvalid("the answer did not call submit_review")
                review = parse_review(tool.get("input"))
            except ReviewInvalid as err:
                return JudgeVerdict(problem=str(err))
            assert request.task_input is not None  # a request from before the store carries it
            record = JudgeRecord(task_input=request.task_input, review=review,
                                 cache_key=prepared.cache_key, commit=request.commit,
                                 round=request.round)
            name, argument, result_type = ACTIVITY_JUDGE_RECORD, record, None
        else:
            answer = JudgeAnswer(reply=reply.message_ref, cache_key=prepared.cache_key,
                                 commit=request.commit, task_input=request.task_input,
                                 task=request.task, edits_cache_key=request.edits_cache_key,
                                 edits=request.edits)
            name, argument, result_type, review = ACTIVITY_JUDGE_VERDICT, answer, JudgeVerdict, None
        run = workflow.execute_local_activity if request.stored else workflow.execute_activity
        try:
            kept = await run(
                name, argument, result_type=result_type,
                start_to_close_timeout=timedelta(minutes=1),
                retry_policy=RetryPolicy(maximum_attempts=3),
                summary=f"{task.id}: check and keep the verdict"[:100],
            )
        except ActivityError as err:  # the verdict stands; only its cache entry or lesson is lost
            workflow.logger.warning("could not record the verdict: %s", root_cause_message(err))
            if review is None:
                self.problem = root_cause_message(err)
                return None
            kept = None
        return kept if isinstance(kept, JudgeVerdict) else JudgeVerdict(review=review)

    def _tally(self) -> JudgeTally:
        u = self.calls.usage
        t = self.tally
        t.calls, t.direct_calls, t.batch_ids = u.requests, u.direct_calls, list(u.batch_ids)
        t.input_tokens, t.output_tokens, t.cost_usd = u.input_tokens, u.output_tokens, u.cost_usd
        t.cache_read_tokens = u.cache_read_tokens
        return t

    def _details(self, outcome: str = "") -> None:
        u = self.calls.usage
        lines = [self._title, "",
                 f"- stage: {self.stage}" + (f" (answer {self.answers})" if self.answers else ""),
                 f"- Claude: {u.requests} request(s), tokens in {u.input_tokens} out "
                 f"{u.output_tokens}, est. ${u.cost_usd:.4f}"]
        if self.problem:
            lines.append(f"- off the schema: {self.problem[:200]}")
        if outcome:
            lines.append(f"- {outcome[:300]}")
        workflow.set_current_details("\n".join(lines))

    def _done(self, review: Any = None, error: str = "", cache_hit: bool = False) -> Any:
        """The outcome, compact (the caller's `JudgeOutcome` fills in its defaults)."""
        tally = self._tally()
        if review is not None:
            tally.approved += review.verdict == VERDICT_APPROVE
            tally.revised += review.verdict == VERDICT_REVISE
            tally.rejected += review.verdict == VERDICT_REJECT
        self.stage = "done"
        self._details(
            f"verdict: {review.verdict}" + (" (from the result cache)" if cache_hit else "")
            if review is not None else f"no verdict: {error}")
        return compact(JudgeOutcome(review=review, error=error, source=JUDGE_BY_CLAUDE,
                                    cache_hit=cache_hit, tally=tally))
