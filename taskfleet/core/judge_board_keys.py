"""The judge's board keys and their checks, used by core/boards.py: a judge is either Claude
(`judge = "anthropic"`, with `judge_model`, `judge_template`, `judge_max_tokens`) or a command
(`judge_run`), never both."""

from __future__ import annotations

from typing import Any

ANTHROPIC_JUDGE = "anthropic"
JUDGE_KEYS = ("judge", "judge_model", "judge_template", "judge_max_tokens", "judge_run")


def has_judge(spec: Any) -> bool:
    return bool(spec.judge or spec.judge_run.strip())


def judge_fields_problem(spec: Any) -> str:
    """What is wrong with a task's judge fields, or "" (the message names the key)."""
    if not isinstance(spec.judge, str) or spec.judge not in ("", ANTHROPIC_JUDGE):
        return f"judge must be 'anthropic' (or use judge_run = COMMAND), got {spec.judge!r}"
    if not isinstance(spec.judge_run, str):
        return "judge_run must be a command line (a string)"
    if spec.judge and spec.judge_run.strip():
        return "sets both judge = 'anthropic' and judge_run; choose one"
    if not isinstance(spec.judge_model, str) or len(spec.judge_model) > 200:
        return "judge_model must be a model id string"
    if not isinstance(spec.judge_template, str) or not spec.judge_template.strip():
        return "judge_template must be a template name (or template text)"
    tokens = spec.judge_max_tokens
    if not isinstance(tokens, int) or isinstance(tokens, bool) or not 1 <= tokens <= 1_000_000:
        return "judge_max_tokens must be a whole number >= 1"
    if has_judge(spec) and spec.worktree is False:
        return "a judge needs worktree = true (it reviews the task's commit)"
    return ""
