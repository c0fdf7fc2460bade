"""What a task's own agent reports it cost in `TASKFLEET_USAGE_FILE`: one JSON object, or JSON lines
summed; dollars from `cost_usd` or `total_cost_usd`, tokens from `input_tokens`/`output_tokens`
(top level or under `usage`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

USAGE_FILE_MAX_BYTES = 1024 * 1024  # read at most this much of the file


@dataclass
class AgentUsage:
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0


def _number(value: Any) -> float:
    return (float(value) if isinstance(value, (int, float)) and not isinstance(value, bool)
            and value >= 0 else 0.0)


def parse_usage_report(text: str) -> AgentUsage | None:
    """The figures the text reports, or None when none (empty, not JSON, no known field)."""
    try:
        objects = [json.loads(text)]
    except ValueError:
        objects = []
        for line in text.splitlines():
            try:
                objects.append(json.loads(line))
            except ValueError:
                continue
    usage, found = AgentUsage(), False
    for obj in objects:
        if not isinstance(obj, dict):
            continue
        inner = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
        for source in (obj, inner):
            for key in ("cost_usd", "total_cost_usd"):
                if key in source:
                    usage.cost_usd += _number(source[key])
                    found = True
            if "input_tokens" in source or "output_tokens" in source:
                usage.input_tokens += int(_number(source.get("input_tokens")))
                usage.output_tokens += int(_number(source.get("output_tokens")))
                found = True
    return usage if found else None
