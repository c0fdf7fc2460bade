"""A Claude fleet at full parallelism: 300 tasks, each with a Claude judge and a 190 KB context
file, all started at once, land with every workflow run's history under the floors (no run over
4 MB, at most 20 KB of history per task) and no run terminated; real server, real git, the real
`anthropic` client against the stand-in."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from taskfleet.clients.orchestrator import start_board
from taskfleet.core.models.orchestrator import Board, TaskSpec
from taskfleet.testing.standin import StandIn
from tests.conftest import git
from tests.llm_support import standin_env

pytestmark = [pytest.mark.slow, pytest.mark.heavy(seconds=120)]
TASKS = 300


@pytest.fixture
def standin() -> Iterator[StandIn]:
    with standin_env() as server:
        yield server


@pytest.mark.timeout(600)
async def test_300_tasks_with_190_kb_contexts_land_within_the_history_floors(
    client, make_worker, task_queue, git_remote, standin
):
    line = "the spec says the fleet keeps its prompts out of workflow history\n"
    git_remote.change(git_remote.clone, "spec.txt", line * (190_000 // len(line)))
    git(git_remote.clone, "add", "spec.txt")
    git(git_remote.clone, "commit", "-qm", "spec")
    git(git_remote.clone, "push", "-q", "origin", "HEAD")
    tasks = [
        TaskSpec(
            id=f"F{i}",
            scope=f"write llm/F{i}.txt",
            implementer="anthropic",
            judge="anthropic",
            context=["spec.txt"],
            verify="test -f llm/$TASKFLEET_TASK_ID.txt",
            refresh=True,
            llm_batch_max_age_seconds=3,
            timeout_seconds=300,
        )
        for i in range(TASKS)
    ]
    async with make_worker():
        handle = await start_board(
            client,
            Board(tasks=tasks, name="fleet", max_parallel=TASKS),
            str(git_remote.clone),
            task_queue=task_queue,
            git_max_batch_size=100,
            git_max_batch_age_seconds=1,
        )
        result = await handle.result()
    assert sum(t.landed for t in result.tasks) == TASKS, [t for t in result.tasks if not t.landed][
        :3
    ]
    sizes, terminated = {}, []
    async for run in client.list_workflows(f"TaskQueue = '{task_queue}'"):
        history = await client.get_workflow_handle(run.id, run_id=run.run_id).fetch_history()
        sizes[f"{run.id} {run.run_id}"] = sum(event.ByteSize() for event in history.events)
        if run.status.name == "TERMINATED":
            terminated.append(run.id)
    assert not terminated, terminated
    assert len(sizes) >= 2 * TASKS + 2  # the run, each task and its judge, the batchers
    largest = max(sizes, key=sizes.__getitem__)
    assert sizes[largest] <= 4_000_000, (largest, sizes[largest])
    assert sum(sizes.values()) / TASKS <= 20_000, sum(sizes.values()) / TASKS
    assert sorted(set(standin.batch_sizes())) != [1]  # the requests shared batches
