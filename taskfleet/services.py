"""Worker-memory services and the activity objects that use them, started and stopped with the worker."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from activities.git_push import GitPushActivities
from activities.lessons import LessonsActivities
from activities.lessons_index import LessonsIndex
from activities.result_cache import ResultCache
from activities.smoke import SmokeActivities
from activities.tasks import TaskActivities
from activities.templates import TemplateCache
from taskfleet.settings import TaskfleetSettings

log = logging.getLogger("taskfleet.services")


class WorkerServices:
    """Owns the worker-memory services and the objects whose bound methods are our activities.

    Building them is cheap; loading (lessons file, template compilation, cache database) happens in
    `running()`, which the plugin runs as the worker's `run_context`: once per worker start, and a
    broken template or unreadable file stops that start with a clear message.
    """

    def __init__(self, settings: TaskfleetSettings) -> None:
        self.settings = settings
        self.lessons = LessonsIndex(settings.lessons_path)
        self.templates = TemplateCache(settings.templates_dir)
        self.result_cache = ResultCache(settings.result_cache_path, settings.result_cache_memory_bytes)
        self.smoke = SmokeActivities()
        self.git = GitPushActivities()
        self.lesson_activities = LessonsActivities(self.lessons)
        self.tasks = TaskActivities(settings, self.lessons, self.templates, self.result_cache)
        self.started = False

    def activities(self) -> list[Callable]:
        return [
            self.smoke.greet,
            self.git.push_batch,
            self.lesson_activities.query_lessons,
            self.lesson_activities.record_lesson,
            self.lesson_activities.lessons_stats,
            self.tasks.run_task,
        ]

    async def start(self) -> None:
        self.settings.logs_dir.mkdir(parents=True, exist_ok=True)
        names = self.templates.load()
        stats = await asyncio.to_thread(self.lessons.load)
        if stats.malformed_lines:
            log.warning(
                "lessons file %s: skipped %d malformed line(s), first at lines %s",
                stats.path, stats.malformed_lines, stats.malformed_line_numbers[:10],
            )
        await asyncio.to_thread(self.result_cache.open)
        stale = await asyncio.to_thread(self.tasks.worktrees.prune_stale)
        await asyncio.to_thread(self.tasks.scratch.prune_stale)
        if stale:
            log.warning("removed %d worktree(s) left by a crashed worker: %s", len(stale), ", ".join(map(str, stale)))
        log.info(
            "taskfleet services: %d lessons in %.2fs, %d templates (%s), result cache %s",
            stats.lessons, stats.build_seconds, len(names), ", ".join(names), self.settings.result_cache_path,
        )
        self.started = True

    def stop(self) -> None:
        self.started = False
        self.result_cache.close()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        await self.start()
        try:
            yield
        finally:
            self.stop()
