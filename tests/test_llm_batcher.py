"""LLMBatchWorkflow as an entity: any input to `submit` is refused without wedging it, repeats are
ignored, it continues as new with its state, and a worker SIGKILLed while the batch create is in
flight never leads to a second batch."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from taskfleet.clients.orchestrator import start_board
from taskfleet.core.boards import parse_toml_board
from taskfleet.core.llm_ids import llm_batch_workflow_id
from taskfleet.core.models.llm import LLMBatchStatus
from taskfleet.core.names import LLM_BATCH_WORKFLOW, QUERY_STATUS, SIGNAL_FLUSH, SIGNAL_SUBMIT
from taskfleet.testing.standin import StandIn
from tests.conftest import WorkerProcess, eventually
from tests.llm_support import FAST_POLLS, standin_env
from tests.test_llm_tasks import assert_landed, llm_board

# one of the longest files: `make test` starts it early
pytestmark = pytest.mark.heavy(seconds=36, waits=True)

@pytest.fixture
def standin() -> Iterator[StandIn]:
    with standin_env() as server:
        yield server


PARAMS = {"model": "claude-test", "max_tokens": 64,
          "messages": [{"role": "user", "content": "Task id: X1\nhi"}]}


def request(custom_id: str, **extra: object) -> dict:
    return {"custom_id": custom_id, "params": PARAMS, "reply_to": "nobody-listens",
            "max_batch_age_seconds": 3600, **extra}


async def status_of(handle) -> LLMBatchStatus:
    return await handle.query(QUERY_STATUS, result_type=LLMBatchStatus)


async def test_submit_takes_anything_and_never_wedges(client: Client, make_worker,
                                                      task_queue, standin):
    handle = await client.start_workflow(LLM_BATCH_WORKFLOW, {"poll_initial_seconds": 0.1},
                                         id=f"llm-batch-{uuid.uuid4().hex[:8]}",
                                         task_queue=task_queue)
    nested: object = "leaf"
    for _ in range(600):
        nested = [nested]
    bad = [[], ["a", "b"], ["just a string"], ["x" * 1_500_000], [nested],
           [request("bad id with spaces")], [request("ok-1", params={"model": "m"})],
           [{**request("ok-1"), "surprise": 1}], [request("ok-1", max_batch_size=0)]]
    async with make_worker():
        for args in bad:
            await handle.signal(SIGNAL_SUBMIT, args=args)
        await handle.signal(SIGNAL_SUBMIT, request("good-1"))
        await handle.signal(SIGNAL_SUBMIT, request("good-1"))  # a repeat
        await handle.signal(SIGNAL_FLUSH)

        async def delivered() -> LLMBatchStatus:
            status = await status_of(handle)
            assert status.stats.results_delivered == 1, status.stats
            return status

        status = await eventually(delivered, timeout=30)
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    assert status.stats.rejected == len(bad) and len(status.rejected) == len(bad)
    assert all(len(r.what) < 300 for r in status.rejected)
    assert "one request object, got 0" in status.rejected[0].reason
    assert "custom_id" in status.rejected[5].reason and "max_tokens" in status.rejected[6].reason
    assert status.stats.duplicates == 1 and status.stats.batches_created == 1
    assert standin.batch_sizes() == [1]
    await handle.terminate()


async def test_continues_as_new_with_its_state(client: Client, make_worker, task_queue, standin):
    handle = await client.start_workflow(
        LLM_BATCH_WORKFLOW, {"poll_initial_seconds": 0.1, "max_history_events": 30},
        id=f"llm-batch-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
    async with make_worker():
        for i in range(6):
            await handle.signal(SIGNAL_SUBMIT, request(f"r-{i}", max_batch_age_seconds=0))

            async def sent(i: int = i) -> None:
                status = await status_of(handle)
                assert status.stats.results_delivered == i + 1, status.stats

            await eventually(sent, timeout=30)
        await handle.signal(SIGNAL_SUBMIT, request("r-0"))  # remembered across runs: a repeat
        status = await eventually(lambda: _ran_twice(handle), timeout=30)
    assert status.runs >= 2 and status.stats.batches_created == 6 and status.stats.duplicates == 1
    assert standin.calls["batches.create"] == 6
    await handle.terminate()


async def _ran_twice(handle) -> LLMBatchStatus:
    status = await status_of(handle)
    assert status.runs >= 2 and status.stats.duplicates == 1, (status.runs, status.stats)
    return status


async def test_worker_killed_after_the_batch_create_still_one_create(
        client: Client, server_address: str, task_queue: str, git_remote, tmp_path: Path, standin):
    # the API records the batch but its answer never reaches worker 1
    standin.create_delays = [120.0]
    env = {**standin.env(), **FAST_POLLS, "TASKFLEET_LLM_API_TIMEOUT_SECONDS": "6"}
    args = ("--address", server_address, "--task-queue", task_queue, "--state-dir",
            str(tmp_path / "state"))
    first = WorkerProcess(*args, log=tmp_path / "worker1.log", env=env)
    try:
        await first.wait_started()
        board = parse_toml_board(llm_board(3, llm_batch_max_size=3))
        handle = await start_board(client, board, str(git_remote.clone), task_queue=task_queue,
                                   git_max_batch_age_seconds=1)

        async def created() -> None:
            assert standin.calls["batches.create"] == 1

        await eventually(created, timeout=60)
    finally:
        first.kill_group()
    second = WorkerProcess(*args, log=tmp_path / "worker2.log", env=env)
    try:
        await second.wait_started()
        result = await handle.result()
        batcher = client.get_workflow_handle(llm_batch_workflow_id(task_queue))
        status = await status_of(batcher)
    finally:
        second.kill_group()
    assert_landed(result, git_remote)
    assert standin.calls["batches.create"] == 1 and standin.calls["batches.list"] >= 1
    assert status.stats.batches_created == 1 and status.stats.batches_recovered == 1
    # never logged
    assert standin.env()["ANTHROPIC_API_KEY"] not in first.output() + second.output()


async def test_an_idle_batcher_flushes_a_request_at_its_age(client: Client, make_worker,
                                                            task_queue, standin):
    """Idle, the batcher waits with no timer; a request must still go out at its age, with no other
    message to wake it."""
    handle = await client.start_workflow(LLM_BATCH_WORKFLOW, {"poll_initial_seconds": 0.1},
                                         id=f"llm-batch-{uuid.uuid4().hex[:8]}",
                                         task_queue=task_queue)
    async with make_worker():
        await status_of(handle)  # running and idle
        await handle.signal(SIGNAL_SUBMIT, request("aged-1", max_batch_age_seconds=0.5))

        async def delivered() -> None:
            assert (await status_of(handle)).stats.results_delivered == 1

        await eventually(delivered, timeout=30)
    assert standin.batch_sizes() == [1]
    await handle.terminate()
