"""`taskfleet_run_task_group`: several tasks without a worktree, run by one activity, because one
activity per no-op task costs more server CPU than the task. Each runs as `taskfleet_run_task`
runs it, with one `TaskResult` each; a task that raises fails alone. A retried group runs its
tasks again: safe, as a group holds only tasks that change nothing."""

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
        activity.logger.info("group of %d tasks from %s", len(group.tasks),
                             group.tasks[0].id if group.tasks else "-")
        # return_exceptions: a cancelled group waits until every task has stopped its processes.
        results = await asyncio.gather(*(self._one(group, task) for task in group.tasks),
                                       return_exceptions=True)
        return TaskGroupResult(
            results=[r if isinstance(r, TaskResult)
                     else TaskResult(id=t.id, status=TASK_FAILED, reason=root_cause_message(r))
                     for r, t in zip(results, group.tasks)])

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
