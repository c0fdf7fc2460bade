"""`taskfleet demo --llm`: which Claude the demo talks to, said plainly.

With `ANTHROPIC_API_KEY` set, the real API (and real cost: three requests in one Message Batch).
Without it, the bundled offline stand-in on 127.0.0.1 answers with the canned edits of
`examples/llm-board.answers.toml`, through the same SDK calls; no model is involved.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from taskfleet.llm_standin import StandIn, default_behavior

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def canned_answers(path: Path) -> Any:
    answers = tomllib.loads(path.read_text())

    def behave(task_id: str, params: dict) -> dict:
        answer = answers.get(task_id)
        return dict(answer) if answer else default_behavior(task_id, params)

    return behave


@contextmanager
def llm_backend(answers: Path) -> Iterator[str]:
    """Yields the line to print; sets this process's environment for the stand-in when it is used."""
    if os.environ.get("ANTHROPIC_API_KEY"):
        where = os.environ.get("ANTHROPIC_BASE_URL") or "the Anthropic API"
        yield f"Claude: ANTHROPIC_API_KEY is set, so the demo calls {where} (this costs money)."
        return
    standin = StandIn(default=canned_answers(answers), batch_polls=1).start()
    saved = {k: os.environ.get(k) for k in standin.env()}
    os.environ.update(standin.env())
    try:
        yield (f"Claude: ANTHROPIC_API_KEY is not set, so the demo uses the bundled OFFLINE STAND-IN at "
               f"{standin.url}: no model is called; its answers are canned ({answers.name}).")
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        calls = standin.calls
        print(f"stand-in API calls: {calls['batches.create']} batch create(s) for {len(standin.requests)} request(s), "
              f"{calls['messages.create']} direct call(s)")
        standin.stop()
