"""Wire types of the lessons index: a lesson, queries, matches and stats."""

# No `from __future__ import annotations`: the data converter resolves these hints on every payload.
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Lesson:
    """One past failure and what resolved it; one line of the lessons JSONL file."""

    id: str = ""
    task_type: str = ""
    activity_type: str = ""
    failure_type: str = ""  # verify_failed, exec_failed, timeout, ...
    failure_msg: str = ""
    resolution: str = ""
    pattern: str = ""  # normalized failure_msg: numbers, hashes and temp paths stripped
    times_seen: int = 1
    first_seen: str = ""  # ISO-8601
    last_seen: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class LessonQuery:
    """Input of `query_lessons`: every field given must match (AND); `similar_to` ranks by BM25."""

    task_type: str = ""
    activity_type: str = ""
    failure_type: str = ""
    pattern: str = ""
    similar_to: str = ""
    seen_after: str = ""  # ISO-8601, inclusive
    seen_before: str = ""
    most_frequent: bool = False
    limit: int = 20


@dataclass
class LessonMatch:
    lesson: Lesson
    score: float = 0.0


@dataclass
class LessonsStats:
    lessons: int = 0
    lines_read: int = 0
    malformed_lines: int = 0
    malformed_line_numbers: list[int] = field(default_factory=list)  # the first few, to fix by hand
    path: str = ""
    build_seconds: float = 0.0
    task_types: int = 0
    tokens: int = 0


@dataclass
class LessonsAnswer:
    """Result of `LessonsQueryWorkflow` (what `taskfleet lessons query|stats` prints)."""

    stats: LessonsStats
    matches: list[LessonMatch] = field(default_factory=list)

