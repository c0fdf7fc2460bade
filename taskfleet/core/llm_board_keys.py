"""The board keys of the Claude implementer and their checks, used by core/boards.py."""

from __future__ import annotations

import posixpath
from typing import Any

ANTHROPIC = "anthropic"
IMPLEMENTERS = ("", "command", ANTHROPIC)
LLM_KEYS = ("implementer", "model", "max_tokens", "context", "max_attempts", "llm_batch",
            "llm_batch_max_size", "llm_batch_max_age_seconds")


def _whole(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def llm_fields_problem(spec: Any) -> str:
    """What is wrong with a task's LLM fields, or "" (the message names the key)."""
    if spec.implementer not in IMPLEMENTERS:
        return f"implementer must be 'anthropic' (or unset for a `run` command), got {spec.implementer!r}"
    if spec.implementer == ANTHROPIC and spec.run.strip():
        return "sets both implementer = 'anthropic' and run; choose one"
    if spec.implementer == ANTHROPIC and not spec.worktree:
        return "implementer = 'anthropic' needs worktree = true (its edits are committed)"
    if not isinstance(spec.model, str) or len(spec.model) > 200:
        return "model must be a model id string"
    if not _whole(spec.max_tokens, 1, 1_000_000):
        return "max_tokens must be a whole number >= 1"
    if not isinstance(spec.context, list) or not all(isinstance(g, str) and g.strip() for g in spec.context):
        return "context must be a list of repo-relative globs (strings)"
    for glob in spec.context:
        if posixpath.isabs(glob) or ".." in glob.split("/"):
            return f"context glob {glob!r} must be repo-relative, without '..'"
    if not _whole(spec.max_attempts, 1, 20):
        return "max_attempts must be a whole number 1..20"
    if not isinstance(spec.llm_batch, bool):
        return "llm_batch must be true or false"
    if not _whole(spec.llm_batch_max_size, 1, 100_000):
        return "llm_batch_max_size must be a whole number 1..100000"
    age = spec.llm_batch_max_age_seconds
    if not isinstance(age, (int, float)) or isinstance(age, bool) or not 0 <= age <= 86_400:
        return "llm_batch_max_age_seconds must be a number 0..86400"
    return ""
