"""Worker-memory services and the activity objects that use them, started and stopped with the worker."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from activities.git_push import GitPushActivities
from activities.smoke import SmokeActivities
from taskfleet.settings import TaskfleetSettings


class WorkerServices:
    """Owns the objects whose bound methods are taskfleet's activities.

    Building them is cheap; anything slow (indexes, caches) is loaded in `running()`, which the
    plugin runs as the worker's `run_context`, so it happens once per worker start.
    """

    def __init__(self, settings: TaskfleetSettings) -> None:
        self.settings = settings
        self.smoke = SmokeActivities()
        self.git = GitPushActivities()
        self.started = False

    def activities(self) -> list[Callable]:
        return [self.smoke.greet, self.git.push_batch]

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        self.settings.logs_dir.mkdir(parents=True, exist_ok=True)
        self.started = True
        try:
            yield
        finally:
            self.started = False
