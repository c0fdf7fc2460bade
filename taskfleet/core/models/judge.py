"""Wire types of the judge role: `JudgeWorkflow`, the judge's activities and what they return."""

# No `from __future__ import annotations`: the data converter resolves these hints on every payload.
from dataclasses import dataclass, field
from typing import Optional

from taskfleet.core.models.orchestrator import TaskInput
from taskfleet.core.models.review import JudgeTally, Review

JUDGE_BY_CLAUDE = "anthropic"
JUDGE_BY_COMMAND = "command"


@dataclass
class JudgeRequest:
    """Judge this commit of this task (input of `JudgeWorkflow` and of the judge's activities)."""

    task_input: TaskInput
    commit: str
    verify_tail: str = ""  # the end of the task's log: the verify command's output is taken from it
    round: int = 1  # which judging of this task (1, then 2 after a revise round, ...)
    attempt: int = 1  # the implementer's attempt that made the commit


@dataclass
class PreparedJudge:
    params: dict  # the Messages API request: model, max_tokens, system, messages, tools, tool_choice
    cache_key: str
    diff_bytes: int
    cached: Optional[Review] = None  # a result-cache hit: the verdict given to this request before


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
    # A Claude task: its approved edits, kept in the result cache under the request's key (kept
    # only once approved, so the same board next time applies edits that passed its judge).
    edits_cache_key: str = ""
    edits: Optional[list] = None
    summary: str = ""
