"""Validation of `task_stage`, the signal a task's activity or child workflow sends the orchestrator
as the task moves on: anyone with the `temporal` CLI can send it too."""

from __future__ import annotations

from typing import Any

from taskfleet.core.llm_validation import describe
from taskfleet.core.models.review import STAGES, VERDICTS, TaskStage


class InvalidStage(ValueError):
    pass


def parse_task_stage(args: tuple) -> TaskStage:
    if len(args) != 1:
        raise InvalidStage(f"task_stage takes one object, got {len(args)} arguments")
    raw: Any = args[0]
    if isinstance(raw, TaskStage):
        raw = vars(raw)
    if not isinstance(raw, dict):
        raise InvalidStage(f"a stage must be an object, got {type(raw).__name__}")
    task_id, stage, verdict = raw.get("task_id"), raw.get("stage"), raw.get("verdict", "")
    if not isinstance(task_id, str) or not task_id or len(task_id) > 64:
        raise InvalidStage("task_id must be a task id")
    if stage not in STAGES:
        raise InvalidStage(f"stage must be one of {', '.join(STAGES)}")
    if verdict not in ("", *VERDICTS):
        raise InvalidStage(f"verdict must be one of {', '.join(VERDICTS)} (or empty)")
    return TaskStage(task_id=task_id, stage=stage, verdict=verdict)


def describe_refused(args: tuple, reason: str) -> str:
    return f"{describe(args)[:160]}: {reason}"[:300]
