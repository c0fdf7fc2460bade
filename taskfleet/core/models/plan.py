"""Wire types of the planner role: `PlannerWorkflow`'s input, its prepare activity, its answer."""

# No `from __future__ import annotations`: the data converter resolves these hints on every payload.
from dataclasses import dataclass, field
from typing import Optional

from taskfleet.core.models.llm import ModelUsage
from taskfleet.core.models.payload import PayloadRef

PLAN_PREPARING = "preparing"
PLAN_ASKING = "asking"
PLAN_FIXING = "fixing"  # the fix round: the parser's errors went back to the model
PLAN_DONE = "done"
PLAN_FAILED = "failed"


@dataclass
class PlanInput:
    """What to plan. Sent as plain JSON by `taskfleet plan` or by hand
    (`temporal workflow start`)."""

    goal: str
    repo: str  # absolute path of the clone on the worker
    base: str = "main"
    remote: str = "origin"
    context: list[str] = field(default_factory=list)  # repo-relative globs, read at the base commit
    max_tasks: int = 20  # a board with more tasks is refused, never cut
    model: str = ""  # "": the worker's default model
    max_tokens: int = 8192
    template: str = "planner.j2"
    # A person usually waits for a plan: one direct call by default (true: a Message Batch)
    llm_batch: bool = False
    llm_batch_max_size: int = 100_000
    llm_batch_max_age_seconds: float = 10.0


@dataclass
class PreparedPlan:
    params: dict = field(default_factory=dict)  # inline: only from before the payload store
    base_commit: str = ""
    files_listed: int = 0  # of the repository's file list, in the prompt
    files_total: int = 0
    prompt_hash: str = ""
    request: Optional[PayloadRef] = None  # the Messages API request, in the payload store
    model: str = ""


@dataclass
class PlanAnswer:
    """The planner's stored reply, to check with the board parser `taskfleet run` uses."""

    reply: PayloadRef
    base: str
    goal: str
    max_tasks: int


@dataclass
class PlanCheck:
    """A board that passed (`board_toml`), or why the answer was refused (`problems`)."""

    board_toml: str = ""
    name: str = ""
    task_ids: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class PlanResult:
    board_toml: str  # a board `taskfleet run` accepts unchanged
    name: str
    task_ids: list[str]
    base: str
    base_commit: str
    attempts: int  # model answers asked for (2 when the first board was refused and fixed)
    usage: ModelUsage = field(default_factory=ModelUsage)


@dataclass
class PlanStatus:
    stage: str
    attempts: int
    problems: list[str]  # why the last answer was refused (the parser's errors)
    usage: ModelUsage
