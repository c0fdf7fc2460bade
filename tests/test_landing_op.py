"""The git op a task's landing sends: what a person reads in `git log` of the target."""

from __future__ import annotations

from taskfleet.activities.task_landing import landing_op
from taskfleet.core.models.orchestrator import TaskInput, TaskSpec


def landing(task: TaskSpec, land: str) -> TaskInput:
    return TaskInput(task=task, repo="/srv/clone", remote="origin", base="main", land=land,
                     run_key="run@1", reply_to="run", git_task_queue="taskfleet")


def test_a_merge_message_names_the_task_and_its_scope_when_it_has_one():
    scoped = landing_op(landing(TaskSpec(id="T1", scope="docs", branch="task/T1"), "merge"),
                        "c" * 40)
    plain = landing_op(landing(TaskSpec(id="T2", branch="task/T2"), "merge"), "c" * 40)
    assert (scoped.message, plain.message) == ("Merge T1: docs", "Merge T2")
    assert (scoped.op_type, scoped.target) == ("merge", "main")
    pushed = landing_op(landing(TaskSpec(id="T3", branch="task/T3"), "push"), "c" * 40)
    assert (pushed.op_type, pushed.message, pushed.force) == ("push", "", True)
