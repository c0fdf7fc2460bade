"""Worker-side settings of the Claude implementer, from the worker's environment; never on the wire.
The `anthropic` SDK reads `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL` itself, so taskfleet never
holds, logs or sends them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from taskfleet.core.models.llm import LLMBatchConfig

DEFAULT_MODEL = "claude-sonnet-5-5"


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


@dataclass
class LLMSettings:
    # `model` of a task that sets none (env TASKFLEET_MODEL)
    default_model: str = field(
        default_factory=lambda: os.environ.get("TASKFLEET_MODEL") or DEFAULT_MODEL)
    # total size of a task's `context` files (env TASKFLEET_LLM_CONTEXT_MAX_BYTES)
    context_max_bytes: int = field(
        default_factory=lambda: int(_env_float("TASKFLEET_LLM_CONTEXT_MAX_BYTES", 200_000)))
    # the batcher's polling: first wait, doubling up to the max (env TASKFLEET_LLM_POLL_*_SECONDS)
    poll_initial_seconds: float = field(
        default_factory=lambda: _env_float("TASKFLEET_LLM_POLL_INITIAL_SECONDS", 1.0))
    poll_max_seconds: float = field(
        default_factory=lambda: _env_float("TASKFLEET_LLM_POLL_MAX_SECONDS", 60.0))
    # one API call's activity timeout (env TASKFLEET_LLM_API_TIMEOUT_SECONDS)
    api_timeout_seconds: float = field(
        default_factory=lambda: _env_float("TASKFLEET_LLM_API_TIMEOUT_SECONDS", 120.0))
    sdk_max_retries: int = 2
    # a Message Batch's most requests and bytes (env TASKFLEET_LLM_BATCH_MAX_*; the API's limits)
    batch_max_requests: int = field(
        default_factory=lambda: int(_env_float("TASKFLEET_LLM_BATCH_MAX_REQUESTS", 100_000)))
    batch_max_bytes: int = field(
        default_factory=lambda: int(_env_float("TASKFLEET_LLM_BATCH_MAX_BYTES", 240e6)))
    # the diff a Claude judge sees, at most (env TASKFLEET_JUDGE_DIFF_MAX_BYTES); a command sees all
    judge_diff_max_bytes: int = field(
        default_factory=lambda: int(_env_float("TASKFLEET_JUDGE_DIFF_MAX_BYTES", 100_000)))

    def batch_config(self) -> LLMBatchConfig:
        return LLMBatchConfig(
            poll_initial_seconds=self.poll_initial_seconds, poll_max_seconds=self.poll_max_seconds,
            api_timeout_seconds=self.api_timeout_seconds,
            max_requests=max(1, min(self.batch_max_requests, 100_000)),
            max_bytes=max(1, self.batch_max_bytes))
