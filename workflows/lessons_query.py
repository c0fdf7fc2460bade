"""`LessonsQueryWorkflow`: lets the CLI ask a worker's in-memory lessons index (queries or stats)."""

from datetime import timedelta
from typing import Optional

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from taskfleet.models import LessonMatch, LessonQuery, LessonsAnswer, LessonsStats


@workflow.defn(name="LessonsQueryWorkflow")
class LessonsQueryWorkflow:
    @workflow.run
    async def run(self, query: Optional[LessonQuery] = None) -> LessonsAnswer:
        options = dict(start_to_close_timeout=timedelta(seconds=30))
        stats = await workflow.execute_activity(
            "lessons_stats", result_type=LessonsStats, summary="lessons stats", **options
        )
        if query is None:
            return LessonsAnswer(stats=stats)
        matches = await workflow.execute_activity(
            "query_lessons", query, result_type=list[LessonMatch], summary="query lessons", **options
        )
        return LessonsAnswer(stats=stats, matches=matches)
