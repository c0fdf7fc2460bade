"""`TaskfleetPlugin`: adds taskfleet's workflows and activities to any Temporal worker."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from temporalio.plugin import SimplePlugin

from taskfleet.services import WorkerServices
from taskfleet.settings import TaskfleetSettings
from workflows.git_batcher import GitBatchWorkflow
from workflows.lessons_query import LessonsQueryWorkflow
from workflows.orchestrator import OrchestratorWorkflow
from workflows.smoke import SmokeWorkflow

WORKFLOWS: list[type] = [SmokeWorkflow, GitBatchWorkflow, OrchestratorWorkflow, LessonsQueryWorkflow]


def _appending(extra: Callable[[], Sequence[Any]]) -> Callable[[Sequence[Any] | None], list[Any]]:
    """A plugin parameter that keeps what the user configured and adds ours after it."""

    def extend(existing: Sequence[Any] | None) -> list[Any]:
        return [*(existing or []), *extra()]

    return extend


class TaskfleetPlugin(SimplePlugin):
    """Use as `Worker(client, task_queue="taskfleet", plugins=[TaskfleetPlugin()])`."""

    def __init__(self, settings: TaskfleetSettings | None = None) -> None:
        self.settings = settings or TaskfleetSettings()
        self.services = WorkerServices(self.settings)
        super().__init__(
            "taskfleet.TaskfleetPlugin",
            workflows=_appending(lambda: WORKFLOWS),
            activities=_appending(self.services.activities),
            run_context=self.services.running,
        )
