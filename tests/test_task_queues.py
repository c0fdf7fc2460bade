"""No coordination is pinned to another task queue: one clone is used from two queues in turn and at
once; a lock an older taskfleet left on a queue nobody polls moves to the coordination queue; and a
wait that no worker can serve ends within seconds with one line naming the queue."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Worker

from taskfleet.activities.git.branch_claims import claims_dir
from taskfleet.activities.pods.lease import LeaseLock, NoWorker
from taskfleet.clients.orchestrator import start_board
from taskfleet.core.lease_lock import lease_lock_workflow_id
from taskfleet.core.models.lease_lock import LeaseLockConfig
from taskfleet.core.models.orchestrator import Board, OrchestratorResult, TaskSpec
from taskfleet.core.names import COORDINATION_TASK_QUEUE, LEASE_LOCK_WORKFLOW
from taskfleet.core.settings import TaskfleetSettings
from taskfleet.plugin import TaskfleetPlugin
from tests.conftest import GitRemoteFixture
from tests.user_cli import assert_one_line_refusal, taskfleet

WRITE = 'echo "$TASKFLEET_TASK_ID" > "$TASKFLEET_TASK_ID.txt"'


def worker(client: Client, queue: str, tmp_path: Path, name: str) -> Worker:
    return Worker(client, task_queue=queue,
                  plugins=[TaskfleetPlugin(TaskfleetSettings(state_dir=tmp_path / name))])


def board(*ids: str) -> Board:
    return Board(tasks=[TaskSpec(id=i, run=WRITE, verify="true") for i in ids], name=f"q-{ids[0]}",
                 max_parallel=4)


async def run(client: Client, b: Board, fx: GitRemoteFixture, queue: str) -> OrchestratorResult:
    handle = await start_board(client, b, str(fx.clone), task_queue=queue,
                               git_max_batch_age_seconds=0.2)
    result = await asyncio.wait_for(handle.result(), 120)
    assert all(t.status == "succeeded" and t.landed
               for t in result.tasks), [(t.id, t.reason) for t in result.tasks]
    return result


async def test_one_clone_from_two_task_queues_in_turn_and_at_once(
        client, git_remote: GitRemoteFixture, tmp_path):
    q1, q2 = f"q1-{uuid.uuid4().hex[:8]}", f"q2-{uuid.uuid4().hex[:8]}"
    async with worker(client, q1, tmp_path, "w1"):
        await run(client, board("A1", "A2"), git_remote, q1)
    # The worker of q1 is gone: the clone's lock must not be left where only it polled.
    async with worker(client, q2, tmp_path, "w2"):
        await run(client, board("B1", "B2"), git_remote, q2)
        async with worker(client, q1, tmp_path, "w1"):
            await asyncio.gather(run(client, board("C1", "C2"), git_remote, q1),
                                 run(client, board("D1", "D2"), git_remote, q2))
    lock = lease_lock_workflow_id(f"branch-claims:{claims_dir(str(git_remote.clone))}")
    assert (await client.get_workflow_handle(lock).describe()).task_queue == COORDINATION_TASK_QUEUE
    for branch in ("A1", "B1", "C2", "D2"):
        assert git_remote.remote_ref(f"task/{branch}")


async def test_a_lock_an_older_taskfleet_left_on_a_queue_nobody_polls_moves(
    client, git_remote: GitRemoteFixture, tmp_path
):
    """As a lock started by a worker of queue `gone` (before the coordination queue) would be: the
    board on another queue does not wait for a worker of `gone`; the lock starts over where every
    worker polls, and its tokens stay above what the clone's fence has seen."""
    folder = claims_dir(str(git_remote.clone))
    resource = f"branch-claims:{folder}"
    lock_id = lease_lock_workflow_id(resource)
    stranded = await client.start_workflow(LEASE_LOCK_WORKFLOW, LeaseLockConfig(resource=resource),
                                           id=lock_id, task_queue=f"gone-{uuid.uuid4().hex[:8]}")
    queue = f"q-{uuid.uuid4().hex[:8]}"
    async with worker(client, queue, tmp_path, "w"):
        await run(client, board("M1"), git_remote, queue)
        described = await client.get_workflow_handle(lock_id).describe()
    assert described.task_queue == COORDINATION_TASK_QUEUE
    first = client.get_workflow_handle(lock_id, run_id=stranded.result_run_id)
    assert (await first.describe()).status == WorkflowExecutionStatus.TERMINATED


async def test_a_lock_on_a_queue_nobody_polls_is_one_clear_error_within_seconds(client):
    nobody = f"nobody-{uuid.uuid4().hex[:8]}"
    lock = LeaseLock(client, f"/shared/{uuid.uuid4().hex[:8]}", task_queue=nobody)
    with pytest.raises(NoWorker) as caught:
        await asyncio.wait_for(lock.acquire("me"), 30)
    assert (f"task queue '{nobody}'" in str(caught.value)
            and "start a taskfleet worker" in str(caught.value))


@pytest.mark.parametrize("command", [
    ["lessons", "stats"],
    ["git", "enqueue", "--wait", "--repo", "REPO", "--op-type", "push", "--branch", "task/x"]])
async def test_a_cli_wait_on_a_queue_nobody_polls_is_one_line(
    server_address, git_remote: GitRemoteFixture, tmp_path, command
):
    nobody = f"nobody-{uuid.uuid4().hex[:8]}"
    args = [str(git_remote.clone) if word == "REPO" else word for word in command]
    done = await taskfleet(server_address, *args, cwd=tmp_path, task_queue=nobody, timeout=60)
    assert_one_line_refusal(done, f"task queue '{nobody}'",
                            f"taskfleet-worker --task-queue {nobody}")
