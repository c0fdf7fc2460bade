"""`taskfleet demo --llm`: which Claude the demo talks to, said plainly. With `ANTHROPIC_API_KEY`
set, the real API (and real cost); without it, the bundled offline stand-in on 127.0.0.1 answers
with the canned edits and reviews of `examples/llm-board.answers.toml` through the same SDK
calls."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from taskfleet.testing.standin import StandIn, default_behavior

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def _answer(data: dict) -> dict:
    return {"summary": data.get("summary", ""), "edits": data.get("edits", [])}


def canned_standin(path: Path) -> StandIn:
    """The stand-in scripted from an answers file: per task its first answer, its answer after the
    judge sent it back (`revised`), and the judge's answers in order (`reviews`)."""
    answers = tomllib.loads(path.read_text())
    script = {task: [_answer(a)] + ([_answer(a["revised"])] if "revised" in a else [])
              for task, a in answers.items()}
    reviews = {task: list(a.get("reviews", [])) for task, a in answers.items()}

    def behave(task_id: str, params: dict) -> dict:
        answer = answers.get(task_id)
        return (_answer(answer.get("revised", answer)) if answer
                else default_behavior(task_id, params))

    return StandIn(script=script, reviews=reviews, default=behave, batch_polls=1)


@contextmanager
def llm_backend(answers: Path) -> Iterator[str]:
    """Yields the line to print; sets this process's environment for the stand-in when used."""
    if os.environ.get("ANTHROPIC_API_KEY"):
        where = os.environ.get("ANTHROPIC_BASE_URL") or "the Anthropic API"
        yield f"Claude: ANTHROPIC_API_KEY is set, so the demo calls {where} (this costs money)."
        return
    with canned_standin(answers).serving() as standin:
        try:
            yield ("Claude: ANTHROPIC_API_KEY is not set, so the demo uses the bundled OFFLINE "
                   f"STAND-IN at {standin.url}: no model is called; its answers are canned "
                   f"({answers.name}).")
        finally:
            calls = standin.calls
            judged = len(standin.requests_for("submit_review"))
            print(f"stand-in API calls: {calls['batches.create']} batch create(s) for "
                  f"{len(standin.requests)} request(s) ({len(standin.requests) - judged} "
                  f"implementer, {judged} judge), {calls['messages.create']} direct call(s)")
