"""`taskfleet_run_task_group`: tasks without a worktree, many per activity, each its own result."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from taskfleet.activities.task_group import TaskGroupActivities
from taskfleet.core.models.orchestrator import TaskInput, TaskSpec
from taskfleet.core.models.task_group import RESULT_TAIL_CHARS, TaskGroupInput
from taskfleet.plugin import WorkerServices
from tests.conftest import eventually, processes_with_environ


@pytest.fixture
async def services(settings):
    services = WorkerServices(settings)
    async with services.running():
        yield services


def group(tasks: list[TaskSpec]) -> TaskGroupInput:
    template = TaskInput(task=tasks[0], repo="/nonexistent", remote="origin", base="main",
                         land="push", run_key="run-1", reply_to="run-1", git_task_queue="q")
    return TaskGroupInput(template=template, tasks=tasks)


async def test_each_task_of_a_group_gets_its_own_result(services, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    tasks = [
        TaskSpec(id="ok", run=f'echo "$TASKFLEET_TASK_ID" > "{out}/$TASKFLEET_TASK_ID"',
                 verify="true", worktree=False),
        TaskSpec(id="noisy", run="seq 1 5000; exit 3", verify="true", worktree=False),
        TaskSpec(id="bad-template", run="true", verify="true", template="{{ nope(", worktree=False),
        TaskSpec(id="wt", run="true", verify="true", worktree=True),
    ]
    result = await ActivityEnvironment().run(TaskGroupActivities(services.tasks).run_task_group,
                                             group(tasks))
    by_id = {r.id: r for r in result.results}
    assert [r.id for r in result.results] == ["ok", "noisy", "bad-template", "wt"]
    assert by_id["ok"].status == "succeeded" and (out / "ok").read_text() == "ok\n"
    assert by_id["noisy"].status == "failed" and by_id["noisy"].reason == "executor exited with 3"
    assert (len(by_id["noisy"].output_tail) == RESULT_TAIL_CHARS
            and by_id["noisy"].output_tail.endswith("5000\n"))
    assert (by_id["bad-template"].status == "failed"
            and "bad-template" in by_id["bad-template"].reason)
    assert by_id["wt"].status == "failed" and "worktree" in by_id["wt"].reason
    # the whole output is in the log
    assert Path(by_id["noisy"].log_path).read_text().count("\n") > 5000


async def test_cancelling_a_group_stops_every_task_process(services, tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    marker = uuid.uuid4().hex  # finds the tasks' processes in /proc (`$$` is namespace-local)
    tasks = [TaskSpec(id=f"s{i}",
                      run=f'echo $$ > "{pids}/$TASKFLEET_TASK_ID"; export GROUP_TEST={marker}; '
                          'sleep 60', verify="true", worktree=False) for i in range(3)]
    env = ActivityEnvironment()
    running = asyncio.ensure_future(
        env.run(TaskGroupActivities(services.tasks).run_task_group, group(tasks)))

    async def all_started():
        assert len(list(pids.iterdir())) == 3

    await eventually(all_started)
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert processes_with_environ(f"GROUP_TEST={marker}") == []
