"""`taskfleet_run_task_group`: several tasks without a worktree, run by one activity.

Why: a task that changes nothing (a check, a report: `worktree = false`) costs its command and
little else, and at fleet scale one activity per task costs more than the task: ~5 ms of server
CPU per activity here, against ~3 ms for a no-op task's two commands. A group runs its tasks
concurrently, each exactly as `taskfleet_run_task` runs it (same code, same log, same lessons),
and returns one `TaskResult` per task, so the orchestrator's bookkeeping stays per task.

A task that raises is that task's failed result, never the group's. A group retried after its
worker was lost runs its tasks again: safe for tasks that change nothing, which is all a group
holds.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from temporalio import activity

from taskfleet.activities.task_runner import TaskActivities
from taskfleet.core.errors import root_cause_message
from taskfleet.core.models.orchestrator import TASK_FAILED, TaskResult, TaskSpec
from taskfleet.core.models.task_group import (
    RESULT_REASON_CHARS,
    RESULT_TAIL_CHARS,
    TaskGroupInput,
    TaskGroupResult,
)
from taskfleet.core.names import ACTIVITY_RUN_TASK_GROUP


class TaskGroupActivities:
    def __init__(self, tasks: TaskActivities) -> None:
        self.tasks = tasks

    @activity.defn(name=ACTIVITY_RUN_TASK_GROUP)
    async def run_task_group(self, group: TaskGroupInput) -> TaskGroupResult:
        activity.logger.info("group of %d tasks from %s", len(group.tasks), group.tasks[0].id if group.tasks else "-")
        # return_exceptions: when the group is cancelled, gather waits until every task has
        # stopped its processes (without it, the first cancelled task would end the group).
        results = await asyncio.gather(*(self._one(group, task) for task in group.tasks), return_exceptions=True)
        return TaskGroupResult(results=[
            r if isinstance(r, TaskResult) else TaskResult(id=t.id, status=TASK_FAILED, reason=root_cause_message(r))
            for r, t in zip(results, group.tasks)
        ])

    async def _one(self, group: TaskGroupInput, task: TaskSpec) -> TaskResult:
        if task.worktree:
            return TaskResult(id=task.id, status=TASK_FAILED, failure_type="bad_group",
                              reason="a task with a worktree cannot run in a group")
        try:
            result = await self.tasks.run_task(replace(group.template, task=task))
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - one task's failure is its own result
            result = TaskResult(id=task.id, status=TASK_FAILED, failure_type=type(err).__name__,
                                reason=root_cause_message(err))
        # Small on the wire: the group's result is one payload.
        result.output_tail = result.output_tail[-RESULT_TAIL_CHARS:]
        result.reason = result.reason[:RESULT_REASON_CHARS]
        return result
