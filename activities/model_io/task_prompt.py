"""A task's prompt: its template rendered with the task, its board and the lessons of its kind.
Command tasks (as `TASKFLEET_PROMPT`) and Claude tasks (as the system prompt) render the same
context, so one template serves both; an inline template is stopped after the cache's time limit,
and a failing one is a non-retryable `TemplateError` (a retry renders the same text)."""

from __future__ import annotations

from dataclasses import asdict

from temporalio.exceptions import ApplicationError

from taskfleet.activities.services.lessons_index import LessonsIndex
from taskfleet.activities.services.template_cache import TemplateCache, TemplateRenderError
from taskfleet.core.models.lessons import LessonQuery
from taskfleet.core.models.orchestrator import TaskInput

PROMPT_LESSONS = 10  # past failures of the task's kind shown in its prompt
PROMPT_QUEUE_LESSONS = 5  # and, landing through the merge queue, what it sent back of that kind
QUEUE_LESSONS = "queue"  # the activity type of lessons the merge queue records


async def render_task_prompt(templates: TemplateCache, lessons: LessonsIndex,
                             params: TaskInput) -> str:
    task = params.task
    query = LessonQuery(task_type=task.task_type, activity_type=task.activity_type,
                        limit=PROMPT_LESSONS)
    found = [asdict(m.lesson) for m in lessons.query(query)]
    landing = params.queue
    if landing is not None:
        # Changes of this kind the merge queue sent back (conflicts, merged results that failed).
        sent_back = LessonQuery(task_type=task.task_type, activity_type=QUEUE_LESSONS,
                                limit=PROMPT_QUEUE_LESSONS)
        found += [asdict(m.lesson) for m in lessons.query(sent_back)]
    context = {
        "task": asdict(task),
        "board": {"base": params.base, "land": params.land},
        "lessons": found,
        # A re-run after the merge queue sent the task's change back: which one, and why.
        "queue": {"attempt": landing.attempt if landing else 0,
                  "feedback": landing.feedback if landing else "",
                  "target": landing.target if landing else ""},
        # A command task's revise round: the judge's review of the commit it starts from.
        "review": ({**asdict(params.review), "commit": params.start_commit} if params.review
                   else None),
    }
    try:
        return (await templates.render_with_limit(task.template, context)).text
    except TemplateRenderError as err:
        raise ApplicationError(f"task {task.id}: {err}", type="TemplateError",
                               non_retryable=True) from None
