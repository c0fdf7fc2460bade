"""Wire types of a task group: several tasks without a worktree run by one activity."""

# No `from __future__ import annotations`: the data converter resolves these hints on every payload.
from dataclasses import dataclass, field

from taskfleet.core.models.orchestrator import TaskInput, TaskResult, TaskSpec

GROUP_MAX_TASKS = 50
RESULT_TAIL_CHARS = 200  # of each task's output tail: the log file holds the rest
RESULT_REASON_CHARS = 300


@dataclass
class TaskGroupInput:
    """`template` is what every task of the group shares (its `task` is ignored); `tasks` run."""

    template: TaskInput
    tasks: list[TaskSpec] = field(default_factory=list)


@dataclass
class TaskGroupResult:
    results: list[TaskResult] = field(default_factory=list)  # one per task, in the input's order
