"""Wire types of the judge role: `JudgeWorkflow`, the judge's activities and what they return."""

# No `from __future__ import annotations`: the data converter resolves these hints on every payload.
from dataclasses import dataclass, field
from typing import Optional

from taskfleet.core.models.orchestrator import TaskInput
from taskfleet.core.models.payload import PayloadRef
from taskfleet.core.models.review import JudgeTally, Review

JUDGE_BY_CLAUDE = "anthropic"
JUDGE_BY_COMMAND = "command"


@dataclass
class JudgeTask:
    """What a judging workflow reads of its task when the `TaskInput` is stored: names, routing."""

    id: str
    reply_to: str  # the workflow that runs the task's rounds (the orchestrator)
    llm_batch: bool = True
    llm_batch_max_size: int = 100_000
    llm_batch_max_age_seconds: float = 10.0


@dataclass
class JudgeRequest:
    """Judge this commit of this task (input of `JudgeWorkflow` and of the judge's activities). The
    task's `TaskInput` inline (a command task; a run from before the payload store) or stored
    (`task`, with `about` for what the workflow reads itself)."""

    task_input: Optional[TaskInput] = None
    commit: str = ""
    verify_tail: str = ""  # the end of the task's log: the verify command's output is taken from it
    round: int = 1  # which judging of this task (1, then 2 after a revise round, ...)
    attempt: int = 1  # the implementer's attempt that made the commit
    # A Claude task's request cache key and stored answer: cached once approved, to land again.
    edits_cache_key: str = ""
    edits: Optional[PayloadRef] = None
    task: Optional[PayloadRef] = None
    about: Optional[JudgeTask] = None
    # Local-activity steps with payloads in the store (an older request: as its history recorded)
    stored: bool = False
    report_stage: bool = False  # its prepare step tells `reply_to` the task is being judged


def judged_task(request: JudgeRequest) -> JudgeTask:
    """The names and routing of the judged task, from whichever form the request carries."""
    if request.about is not None:
        return request.about
    params = request.task_input
    assert params is not None, "a JudgeRequest carries its task inline or stored"
    t = params.task
    return JudgeTask(id=t.id, reply_to=params.reply_to, llm_batch=t.llm_batch,
                     llm_batch_max_size=t.llm_batch_max_size,
                     llm_batch_max_age_seconds=t.llm_batch_max_age_seconds)


@dataclass
class PreparedJudge:
    params: dict = field(default_factory=dict)  # inline: only from before the payload store
    cache_key: str = ""
    diff_bytes: int = 0
    cached: Optional[Review] = None  # a result-cache hit: the verdict given to this request before
    request: Optional[PayloadRef] = None  # the Messages API request, in the payload store
    model: str = ""
    submitted: bool = False  # the request went to the batcher already


@dataclass
class JudgeAnswer:
    """A Claude judge's stored reply, to check against `submit_review` and keep if it fits."""

    reply: PayloadRef
    cache_key: str
    commit: str
    task_input: Optional[TaskInput] = None  # or stored: `task` (for the lesson's names)
    task: Optional[PayloadRef] = None
    edits_cache_key: str = ""  # as in JudgeRequest: kept once approved
    edits: Optional[PayloadRef] = None


@dataclass
class JudgeVerdict:
    """A reply's review, or why it breaks the schema (`problem`, sent back to the judge once)."""

    review: Optional[Review] = None
    problem: str = ""


@dataclass
class JudgeOutcome:
    """A verdict (`review`), or why there is none (`error`), and what judging cost."""

    review: Optional[Review] = None
    error: str = ""
    source: str = ""  # JUDGE_BY_CLAUDE or JUDGE_BY_COMMAND
    cache_hit: bool = False
    tally: JudgeTally = field(default_factory=JudgeTally)


@dataclass
class JudgeRecord:
    """After a Claude verdict: keep it in the result cache, and a lesson when it is not approve."""

    task_input: TaskInput
    review: Review
    cache_key: str
    commit: str
    round: int = 1


@dataclass
class JudgeStatus:
    stage: str  # preparing, asking, retrying (after an answer that broke the schema), done
    answers: int
    problem: str  # why the last answer was refused, if it was
    tally: JudgeTally


@dataclass
class LandInput:
    """Land a task's commit once its judge approved it (`taskfleet_land_task`)."""

    task_input: TaskInput
    commit: str
    # A Claude task's approved edits, cached under its request's key for the same board next time.
    edits_cache_key: str = ""
    edits: Optional[list] = None  # inline: only from before the payload store
    summary: str = ""
