"""Wire types of the planner role: `PlannerWorkflow`'s input, its prepare activity and its answer."""

# No `from __future__ import annotations`: the data converter resolves these hints on every payload.
from dataclasses import dataclass, field

from taskfleet.core.models.llm import ModelUsage

PLAN_PREPARING = "preparing"
PLAN_ASKING = "asking"
PLAN_FIXING = "fixing"  # the fix round: the parser's errors went back to the model
PLAN_DONE = "done"
PLAN_FAILED = "failed"


@dataclass
class PlanInput:
    """What to plan. Sent as plain JSON by `taskfleet plan` or by hand (`temporal workflow start`)."""

    goal: str
    repo: str  # absolute path of the clone on the worker
    base: str = "main"
    remote: str = "origin"
    context: list[str] = field(default_factory=list)  # repo-relative globs read from the base commit
    max_tasks: int = 20  # a board with more tasks is refused, never cut
    model: str = ""  # "": the worker's default model
    max_tokens: int = 8192
    template: str = "planner.j2"
    # A person usually waits for a plan: one direct call by default; true sends it in a Message Batch.
    llm_batch: bool = False
    llm_batch_max_size: int = 100
    llm_batch_max_age_seconds: float = 10.0


@dataclass
class PreparedPlan:
    params: dict  # the Messages API request: model, max_tokens, system, messages, tools, tool_choice
    base_commit: str
    files_listed: int  # of the repository's file list, in the prompt
    files_total: int
    prompt_hash: str


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
