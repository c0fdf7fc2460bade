"""The lessons file's lines: what one lesson is as a line of JSON, read fast and checked. Lines come
from many writers over time (broken, blank, newer with extra fields, nested absurdly deep): a
chunk is decoded at once when sound, else line by line, each validated into a `Lesson` or
refused. Also the failure-pattern and token helpers the index shares with its callers."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import fields
from datetime import datetime, timezone
from typing import Any

from taskfleet.core.models.lessons import Lesson

_LESSON_FIELDS = {f.name for f in fields(Lesson)}
_STRING_FIELDS = _LESSON_FIELDS - {"times_seen", "metadata"}
_FIELD_DEFAULTS = {f.name: f.default for f in fields(Lesson) if f.name != "metadata"}

_TMP_PATH = re.compile(r"(?:/tmp|/var/folders|/private/var|/var/tmp)/\S*")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_HEX = re.compile(r"\b(?:0x)?[0-9a-f]{7,64}\b")
_NUMBER = re.compile(r"\b\d+(?:\.\d+)?\b")
_SPACE = re.compile(r"\s+")
TOKEN = re.compile(r"[a-z_][a-z0-9_]+")
STOPWORDS = frozenset(
    "the a an in of to at is on for and or by with from was were be not no got".split())


class MalformedLesson(ValueError):
    """A line of the lessons file that cannot be a lesson."""


def normalize_pattern(message: str) -> str:
    """The failure with what varies between runs stripped: temp paths, uuids, hashes, numbers."""
    text = message.lower()
    text = _TMP_PATH.sub("<tmp>", text)
    text = _UUID.sub("<uuid>", text)
    text = _HEX.sub("<hex>", text)
    text = _NUMBER.sub("<n>", text)
    return _SPACE.sub(" ", text).strip()[:500]


def tokenize(message: str) -> list[str]:
    return [t for t in TOKEN.findall(message.lower()) if t not in STOPWORDS]


def timestamp(value: str) -> float:
    moment = _fromisoformat(value)
    return (moment if moment.tzinfo is not None
            else moment.replace(tzinfo=timezone.utc)).timestamp()


_fromisoformat = datetime.fromisoformat


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _all_strings(d: dict[str, Any]) -> bool:
    # Unrolled on purpose: called once per line of a 100,000-line build.
    return (
        type(d["id"]) is str and type(d["task_type"]) is str and type(d["activity_type"]) is str
        and type(d["failure_type"]) is str and type(d["failure_msg"]) is str
        and type(d["resolution"]) is str and type(d["pattern"]) is str
        and type(d["first_seen"]) is str and type(d["last_seen"]) is str
    )


# Results are deep copies; a lesson nested hundreds deep would make every query that returns it
# fail with RecursionError, so such a line is malformed.
MAX_METADATA_DEPTH = 32


def _nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether lists/dicts in `value` nest more than `limit` levels (iterative: no recursion)."""
    level: list[Any] = [value]
    for _ in range(limit):
        level = [
            child
            for item in level
            for child in (item.values() if type(item) is dict else item)
            if type(child) is dict or type(child) is list
        ]
        if not level:
            return False
    return True


def lesson_from_json(data: Any) -> tuple[float, Lesson]:
    """Validate one decoded line into (last_seen as epoch seconds, lesson); unknown keys are ignored
    for newer writers. Hot path of a build: `type() is` checks, each timestamp parsed once."""
    if type(data) is not dict:
        raise MalformedLesson("not a JSON object")
    if data.keys() != _LESSON_FIELDS:
        for name in _LESSON_FIELDS.difference(data):
            data[name] = {} if name == "metadata" else _FIELD_DEFAULTS[name]
        for name in set(data).difference(_LESSON_FIELDS):
            del data[name]
    if not data["id"] or type(data["id"]) is not str:
        raise MalformedLesson("missing 'id'")
    if not _all_strings(data):
        raise MalformedLesson(
            f"{', '.join(n for n in sorted(_STRING_FIELDS) if type(data[n]) is not str)} "
            "must be strings")
    times_seen = data["times_seen"]
    if type(times_seen) is not int or times_seen < 1:
        raise MalformedLesson("'times_seen' is not a whole number >= 1")
    if type(data["metadata"]) is not dict:
        raise MalformedLesson("'metadata' is not an object")
    if data["metadata"] and _nested_deeper_than(data["metadata"], MAX_METADATA_DEPTH):
        raise MalformedLesson(f"'metadata' nests deeper than {MAX_METADATA_DEPTH} levels")
    # The decoded dict becomes the instance's __dict__: no copy of every field for every line.
    lesson = object.__new__(Lesson)
    lesson.__dict__ = data
    if not lesson.last_seen:
        lesson.last_seen = lesson.first_seen
    if not lesson.last_seen:
        raise MalformedLesson("missing 'last_seen' and 'first_seen'")
    try:
        seen_at = timestamp(lesson.last_seen)
        if lesson.first_seen and lesson.first_seen != lesson.last_seen:
            timestamp(lesson.first_seen)
    except ValueError:
        raise MalformedLesson("'first_seen'/'last_seen' is not an ISO-8601 time") from None
    lesson.first_seen = lesson.first_seen or lesson.last_seen
    if not lesson.pattern:
        lesson.pattern = normalize_pattern(lesson.failure_msg)
    return seen_at, lesson


def decode_chunk(chunk: bytes, count: int) -> list[Any] | None:
    """All lines of `chunk` (each ending in a newline) as one JSON array, or None if any line is
    blank or not exactly one JSON value."""
    if not count or chunk.startswith(b"\n") or b"\n\n" in chunk:
        return None
    try:
        decoded = json.loads(b"[" + chunk[:-1].replace(b"\n", b",") + b"]")
    except (ValueError, RecursionError):  # deep nesting raises RecursionError, not ValueError
        return None
    return decoded if len(decoded) == count else None


def decode_lines(lines: list[bytes]) -> list[Any]:
    """Decode JSON lines, all in one call when every line is sound, line by line otherwise."""
    try:
        decoded = json.loads(b"[" + b",".join(lines) + b"]")
        if len(decoded) == len(lines):
            return decoded
    except (ValueError, RecursionError):
        pass
    out: list[Any] = []
    for raw in lines:
        try:
            out.append(json.loads(raw))
        except Exception:  # a line the decoder refuses (bad JSON, too deep) is unreadable
            out.append(UNREADABLE)
    return out


UNREADABLE = object()


def copy_lesson(lesson: Lesson) -> Lesson:
    """Callers get copies: nothing they do to a result can corrupt the index."""
    out = copy.copy(lesson)
    out.metadata = copy.deepcopy(lesson.metadata) if lesson.metadata else {}
    return out
