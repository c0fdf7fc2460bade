"""`PlannerWorkflow`: a goal in, a board out (TOML that `taskfleet run` accepts unchanged). prepare
-> Claude answers through the forced `submit_board` -> `taskfleet run`'s board parser checks it; a
refused board (over `max_tasks` too, never cut) gets one fix round, then fails with the errors.
The input is plain JSON checked in code, so a person can start it with the `temporal` CLI."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Optional

from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.errors import root_cause_message
    from taskfleet.core.models.lessons import Lesson
    from taskfleet.core.models.llm import REPLY_SUCCEEDED
    from taskfleet.core.models.plan import (
        PLAN_ASKING,
        PLAN_DONE,
        PLAN_FAILED,
        PLAN_FIXING,
        PLAN_PREPARING,
        PlanAnswer,
        PlanCheck,
        PlanInput,
        PlanResult,
        PlanStatus,
        PreparedPlan,
    )
    from taskfleet.core.names import (
        ACTIVITY_PLAN_CHECK,
        ACTIVITY_PLAN_PREPARE,
        ACTIVITY_RECORD_LESSON,
        PLANNER_WORKFLOW,
        QUERY_STATUS,
        SIGNAL_LLM_REPLY,
    )
    from taskfleet.core.plan_board import BoardRefused, planned_board
    from taskfleet.core.plan_input import InvalidPlanInput, parse_plan_input

from taskfleet.workflows.llm.calls import (
    QUICK,
    Conversation,
    ModelCalls,
    Route,
    called,
    tool_call,
)

TOOL = "submit_board"
ANSWERS = 2  # the first answer, then one fix round


def _refusal(problems: list[str]) -> str:
    return "The board was refused:\n" + "\n".join(f"- {p}" for p in problems) + \
        "\nCall submit_board again with the whole corrected board."


# Worker Versioning: PINNED: a plan's steps run on the version they began on, like a Claude task's.
@workflow.defn(name=PLANNER_WORKFLOW, versioning_behavior=VersioningBehavior.PINNED)
class PlannerWorkflow:
    @workflow.init
    def __init__(self, raw: Any = None) -> None:
        # Parsed here, not by the converter: a bad field fails the workflow, not its tasks forever.
        self.calls = ModelCalls()
        self.stage = PLAN_PREPARING
        self.attempts = 0
        self.problems: list[str] = []
        self.input_error = ""
        self.plan: Optional[PlanInput] = None
        try:
            self.plan = parse_plan_input(raw)
        except InvalidPlanInput as err:
            self.input_error = str(err)

    @workflow.signal(name=SIGNAL_LLM_REPLY)
    def llm_reply(self, *args: Any) -> None:
        """The batcher's answer (a batched plan); malformed or repeated replies are dropped."""
        self.calls.receive(args)

    @workflow.query(name=QUERY_STATUS)
    def status(self) -> PlanStatus:
        return PlanStatus(stage=self.stage, attempts=self.attempts, problems=list(self.problems),
                          usage=self.calls.usage)

    @workflow.run
    async def run(self, raw: Any = None) -> PlanResult:
        if self.plan is None:
            self._fail_stage(self.input_error)
            raise ApplicationError(f"bad PlannerWorkflow start input: {self.input_error}",
                                   type="InvalidPlanInput", non_retryable=True)
        plan = self.plan
        self._details()
        try:
            prepared: PreparedPlan = await workflow.execute_activity(
                ACTIVITY_PLAN_PREPARE, plan, result_type=PreparedPlan,
                start_to_close_timeout=timedelta(minutes=5), retry_policy=QUICK,
                summary="plan: file list, context files, lessons, planner template")
        except ActivityError as err:
            raise self._failure(root_cause_message(err), "PlanSetupError") from None
        model = prepared.model or str(prepared.params.get("model", ""))
        talk = Conversation(prepared.request, prepared.params)
        route = Route(batch=plan.llm_batch, max_batch_size=plan.llm_batch_max_size,
                      max_batch_age_seconds=plan.llm_batch_max_age_seconds)
        for attempt in range(1, ANSWERS + 1):
            self.stage, self.attempts = (PLAN_ASKING if attempt == 1 else PLAN_FIXING), attempt
            self._details()
            reply = await self.calls.ask(talk.request(), model, "plan", attempt, route, "plan")
            self.calls.account(reply, model)
            if reply.type != REPLY_SUCCEEDED:
                raise self._failure(f"the API reported {reply.type}: {reply.error}", "PlanAPIError")
            checked = await self._check(plan, reply)
            if not checked.problems:
                self.stage, self.problems = PLAN_DONE, []
                self._details()
                return PlanResult(board_toml=checked.board_toml, name=checked.name,
                                  task_ids=checked.task_ids, base=plan.base,
                                  base_commit=prepared.base_commit, attempts=attempt,
                                  usage=self.calls.usage)
            self.problems = checked.problems
            await self._lesson(plan, attempt)
            talk.add_reply(reply)
            tool_id = called(reply, TOOL)
            if tool_id is None:
                talk.add_user({"type": "text", "text": "Answer by calling submit_board."})
            else:
                talk.tool_result(tool_id, _refusal(checked.problems))
        raise self._failure(f"the board was refused {ANSWERS} times: " + "; ".join(self.problems),
                            "PlanRefused")

    async def _check(self, plan: PlanInput, reply: Any) -> PlanCheck:
        """The answer's board checked by an activity reading the stored reply (a reply from before
        the payload store is checked here)."""
        if reply.message_ref is not None:
            answer = PlanAnswer(reply=reply.message_ref, base=plan.base, goal=plan.goal,
                                max_tasks=plan.max_tasks)
            try:
                return await workflow.execute_activity(
                    ACTIVITY_PLAN_CHECK, answer, result_type=PlanCheck,
                    start_to_close_timeout=timedelta(minutes=1), retry_policy=QUICK,
                    summary="plan: check the answer's board")
            except ActivityError as err:
                raise self._failure(f"the answer could not be read: {root_cause_message(err)}",
                                    "PlanSetupError") from None
        tool = tool_call(reply.message, TOOL)
        if tool is None:
            return PlanCheck(problems=["the model did not call submit_board"])
        try:
            board = planned_board(tool.get("input"), plan.base, plan.goal, plan.max_tasks)
        except BoardRefused as err:
            return PlanCheck(problems=err.problems)
        return PlanCheck(board_toml=board.text, name=board.name, task_ids=board.task_ids)

    async def _lesson(self, plan: PlanInput, attempt: int) -> None:
        """A refused board is a lesson for later plans (`activity_type` "plan")."""
        lesson = Lesson(activity_type="plan", failure_type="board_refused",
                        failure_msg="\n".join(self.problems),
                        metadata={"goal": plan.goal[:200], "workflow": workflow.info().workflow_id,
                                  "attempt": str(attempt)})
        try:
            await workflow.execute_activity(ACTIVITY_RECORD_LESSON, lesson, result_type=Lesson,
                                            start_to_close_timeout=timedelta(minutes=1),
                                            retry_policy=RetryPolicy(maximum_attempts=3))
        except ActivityError as err:
            workflow.logger.warning("could not record a lesson: %s", root_cause_message(err))

    def _failure(self, reason: str, kind: str) -> ApplicationError:
        self._fail_stage(reason)
        return ApplicationError(f"plan failed: {reason}"[:4000], type=kind, non_retryable=True)

    def _fail_stage(self, reason: str) -> None:
        self.stage = PLAN_FAILED
        if not self.problems:
            self.problems = [reason[:1000]]
        self._details()

    def _details(self) -> None:
        plan, u = self.plan, self.calls.usage
        goal = plan.goal.strip().splitlines()[0][:120] if plan else "(no goal)"
        lines = [f"**plan**: {goal}", "", f"- stage: {self.stage}"
                 + (f" (answer {self.attempts})" if self.attempts else "")]
        if plan is not None:
            lines.append(f"- repo: `{plan.repo}` at `{plan.base}`, at most {plan.max_tasks} tasks")
        lines.append(f"- Claude: {u.requests} request(s), tokens in {u.input_tokens} out "
                     f"{u.output_tokens}, est. ${u.cost_usd:.4f}")
        lines += [f"- refused: {p[:200]}" for p in self.problems[:5]]
        workflow.set_current_details("\n".join(lines))
