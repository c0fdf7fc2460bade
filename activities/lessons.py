"""Activities over the lessons index: `query_lessons`, `record_lesson`, `lessons_stats`."""

from __future__ import annotations

import asyncio
from dataclasses import fields

from temporalio import activity
from temporalio.exceptions import ApplicationError

from taskfleet.activities.services.lessons_index import MAX_LIMIT, LessonsIndex, _timestamp
from taskfleet.core.models.lessons import (
    Lesson,
    LessonMatch,
    LessonQuery,
    LessonsStats,
)
from taskfleet.core.names import (
    ACTIVITY_LESSONS_STATS,
    ACTIVITY_QUERY_LESSONS,
    ACTIVITY_RECORD_LESSON,
)


def _bad_input(message: str) -> ApplicationError:
    return ApplicationError(message, type="InvalidLessonInput", non_retryable=True)


def validate_query(q: LessonQuery) -> None:
    if not isinstance(q.limit, int) or not 1 <= q.limit <= MAX_LIMIT:
        raise _bad_input(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {q.limit!r}")
    for name in ("seen_after", "seen_before"):
        value = getattr(q, name)
        if value:
            try:
                _timestamp(value)
            except (TypeError, ValueError):
                raise _bad_input(f"{name} {value!r} is not an ISO-8601 time") from None


def validate_lesson(lesson: Lesson) -> None:
    for f in fields(Lesson):
        if (f.name not in ("times_seen", "metadata")
                and not isinstance(getattr(lesson, f.name), str)):
            raise _bad_input(f"lesson field {f.name!r} must be a string")
    if not lesson.failure_type or not (lesson.failure_msg or lesson.pattern):
        raise _bad_input("a lesson needs failure_type and failure_msg (or pattern)")
    if not isinstance(lesson.metadata, dict):
        raise _bad_input("lesson metadata must be a JSON object")


class LessonsActivities:
    def __init__(self, index: LessonsIndex) -> None:
        self.index = index

    @activity.defn(name=ACTIVITY_QUERY_LESSONS)
    async def query_lessons(self, q: LessonQuery) -> list[LessonMatch]:
        validate_query(q)
        self.index.refresh()  # lines other workers appended: a stat() when there are none
        return self.index.query(q)

    @activity.defn(name=ACTIVITY_RECORD_LESSON)
    async def record_lesson(self, lesson: Lesson) -> Lesson:
        validate_lesson(lesson)
        stored = await asyncio.to_thread(self.index.record, lesson)
        activity.logger.info(
            "lesson %s (%s/%s %s) seen %d times", stored.id, stored.task_type,
            stored.activity_type, stored.failure_type, stored.times_seen,
        )
        return stored

    @activity.defn(name=ACTIVITY_LESSONS_STATS)
    async def lessons_stats(self) -> LessonsStats:
        self.index.refresh()
        return self.index.stats()
