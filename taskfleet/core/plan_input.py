"""Validation of `PlannerWorkflow`'s start input: a person may type it into the `temporal` CLI, so
it is checked here, in code, with one line naming the key."""

from __future__ import annotations

import posixpath
from typing import Any

from taskfleet.core.git_op_validation import branch_name_problem
from taskfleet.core.models.plan import PlanInput

GOAL_MAX_CHARS = 20_000
MAX_TASKS_LIMIT = 1_000
TEMPLATE_MAX_CHARS = 64 * 1024


class InvalidPlanInput(ValueError):
    """The start input cannot be planned from; the message names the key."""


def _whole(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def parse_plan_input(raw: Any) -> PlanInput:
    if isinstance(raw, PlanInput):
        raw = dict(raw.__dict__)
    if not isinstance(raw, dict):
        raise InvalidPlanInput(
            f"the input must be a JSON object with goal and repo, got {type(raw).__name__}")
    unknown = sorted(str(k) for k in set(raw) - set(PlanInput.__dataclass_fields__))
    if unknown:
        raise InvalidPlanInput(f"unknown key(s) {', '.join(unknown)[:200]}; allowed: "
                               f"{', '.join(PlanInput.__dataclass_fields__)}")
    plan = PlanInput(goal="", repo="")
    for name, value in raw.items():
        setattr(plan, name, value)
    problem = _problem(plan)
    if problem:
        raise InvalidPlanInput(problem)
    plan.llm_batch_max_age_seconds = float(plan.llm_batch_max_age_seconds)
    return plan


def _problem(p: PlanInput) -> str:
    if not isinstance(p.goal, str) or not p.goal.strip():
        return "goal must be a non-empty string"
    if len(p.goal) > GOAL_MAX_CHARS:
        return f"goal is {len(p.goal)} characters; at most {GOAL_MAX_CHARS}"
    if not isinstance(p.repo, str) or not p.repo.startswith("/") or len(p.repo) > 4096:
        return "repo must be the absolute path of the clone on the worker"
    problem = branch_name_problem(p.base)
    if problem:
        return f"base: {problem}"
    if (not isinstance(p.remote, str) or not p.remote or p.remote.startswith("-")
            or len(p.remote) > 255 or any(c.isspace() for c in p.remote)):
        return "remote must be a remote's name (no spaces, not starting with '-')"
    if (not isinstance(p.context, list)
            or not all(isinstance(g, str) and g.strip() for g in p.context)):
        return "context must be a list of repo-relative globs (strings)"
    for glob in p.context:
        if posixpath.isabs(glob) or ".." in glob.split("/"):
            return f"context glob {glob!r} must be repo-relative, without '..'"
    if not _whole(p.max_tasks, 1, MAX_TASKS_LIMIT):
        return f"max_tasks must be a whole number 1..{MAX_TASKS_LIMIT}"
    if not isinstance(p.model, str) or len(p.model) > 200:
        return "model must be a model id string"
    if not _whole(p.max_tokens, 1, 1_000_000):
        return "max_tokens must be a whole number >= 1"
    if (not isinstance(p.template, str) or not p.template.strip()
            or len(p.template) > TEMPLATE_MAX_CHARS):
        return "template must be a template name (or template text)"
    if not isinstance(p.llm_batch, bool):
        return "llm_batch must be true or false"
    if not _whole(p.llm_batch_max_size, 1, 100_000):
        return "llm_batch_max_size must be a whole number 1..100000"
    age = p.llm_batch_max_age_seconds
    if not isinstance(age, (int, float)) or isinstance(age, bool) or not 0 <= age <= 86_400:
        return "llm_batch_max_age_seconds must be a number 0..86400"
    return ""
