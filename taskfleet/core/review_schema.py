"""Checking the judge's answer against `submit_review`'s schema, in the workflow that asked: a
model's answer is untrusted input. Extra keys are ignored; long text is cut; wrong types refused."""

from __future__ import annotations

from typing import Any

from taskfleet.core.models.review import VERDICTS, Review, ReviewComment

MAX_REASONS = 20
MAX_COMMENTS = 50
TEXT_MAX_CHARS = 2000


class ReviewInvalid(ValueError):
    """The answer breaks the schema; the message says how (it goes back to the model once)."""


def parse_review(answer: Any) -> Review:
    if not isinstance(answer, dict):
        raise ReviewInvalid(
            "submit_review's input must be an object with verdict, reasons and comments")
    verdict = answer.get("verdict")
    if verdict not in VERDICTS:
        raise ReviewInvalid(
            f"verdict must be one of {', '.join(VERDICTS)}, got {str(verdict)[:60]!r}")
    reasons = answer.get("reasons", [])
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        raise ReviewInvalid("reasons must be a list of strings")
    comments_in = answer.get("comments", [])
    if not isinstance(comments_in, list):
        raise ReviewInvalid("comments must be a list of {path, line (optional), text} objects")
    comments = []
    for i, comment in enumerate(comments_in[:MAX_COMMENTS]):
        if not isinstance(comment, dict):
            raise ReviewInvalid(
                f"comments[{i}] must be an object with path, line (optional) and text")
        path, text, line = comment.get("path"), comment.get("text"), comment.get("line")
        if not isinstance(path, str) or not isinstance(text, str):
            raise ReviewInvalid(f"comments[{i}]: path and text must be strings")
        if line is not None and (not isinstance(line, int) or isinstance(line, bool) or line < 1):
            raise ReviewInvalid(f"comments[{i}]: line must be a whole number >= 1 (or left out)")
        comments.append(ReviewComment(path=path[:500], text=text[:TEXT_MAX_CHARS], line=line))
    if verdict != "approve" and not reasons and not comments:
        raise ReviewInvalid(f"a {verdict} verdict needs its reasons")
    return Review(verdict=verdict, reasons=[r[:TEXT_MAX_CHARS] for r in reasons[:MAX_REASONS]],
                  comments=comments)


def review_text(review: Review) -> str:
    """The review as a person (or an implementer) reads it: reasons, then `path:line: text`."""
    lines = [f"verdict: {review.verdict}"]
    lines += [f"- {reason}" for reason in review.reasons]
    for c in review.comments:
        lines.append(f"{c.path}{f':{c.line}' if c.line else ''}: {c.text}")
    return "\n".join(lines)


def reasons_line(review: Review, limit: int = 600) -> str:
    """The reasons on one line (a task's failure reason)."""
    text = "; ".join(review.reasons) or "; ".join(f"{c.path}: {c.text}" for c in review.comments)
    return text[:limit]
