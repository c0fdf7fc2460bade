"""`LessonsQueryWorkflow`: lets the CLI ask a worker's in-memory lessons index (queries, stats)."""

from datetime import timedelta
from typing import Optional

from temporalio import workflow
from temporalio.common import VersioningBehavior

from taskfleet.workflows.compat import activity_name

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.models.lessons import (
        LessonMatch,
        LessonQuery,
        LessonsAnswer,
        LessonsStats,
    )
    from taskfleet.core.names import (
        ACTIVITY_LESSONS_STATS,
        ACTIVITY_QUERY_LESSONS,
        LESSONS_QUERY_WORKFLOW,
    )


# Worker Versioning: AUTO_UPGRADE. One short activity and no state: any current version may serve
# it.
@workflow.defn(name=LESSONS_QUERY_WORKFLOW, versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class LessonsQueryWorkflow:
    @workflow.run
    async def run(self, query: Optional[LessonQuery] = None) -> LessonsAnswer:
        options = dict(start_to_close_timeout=timedelta(seconds=30))
        stats = await workflow.execute_activity(activity_name(
            ACTIVITY_LESSONS_STATS), result_type=LessonsStats, summary="lessons stats", **options)
        if query is None:
            return LessonsAnswer(stats=stats)
        matches = await workflow.execute_activity(activity_name(ACTIVITY_QUERY_LESSONS), query,
                                                  result_type=list[LessonMatch],
                                                  summary="query lessons", **options)
        return LessonsAnswer(stats=stats, matches=matches)
