"""Nothing accepted is lost or landed twice: across a worker killed mid-push and across
continue-as-new."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from taskfleet.clients.git_batcher import GitBatcherClient
from taskfleet.core.models.git_batch import GitBatchConfig, GitOp
from taskfleet.core.names import GIT_BATCH_WORKFLOW
from tests.conftest import (
    GitRemoteFixture,
    WorkerProcess,
    eventually,
    git,
    hold_pushes,
    landed_ops,
    save_history,
)

# kills workers of its own mid-push
pytestmark = [pytest.mark.slow, pytest.mark.heavy(seconds=40, waits=True)]


def assert_each_landed_once(fx: GitRemoteFixture, ops: list[GitOp]) -> None:
    for op in ops:
        remote_sha = fx.remote_ref(op.branch)
        assert remote_sha, f"{op.branch} is not on the remote"
        assert remote_sha == git(fx.clone, "rev-parse", op.branch)
        # exactly one commit on top of main: the op was committed once, not again on retry
        assert git(fx.remote, "rev-list", "--count", f"main..{op.branch}") == "1"
        assert f"Taskfleet-Op: {op.id}" in git(fx.remote, "log", "-1", "--format=%B", op.branch)


async def test_worker_killed_during_push_every_op_lands_once(
    client: Client, server_address: str, task_queue: str, git_remote: GitRemoteFixture,
    tmp_path: Path
):
    fx = git_remote
    # The remote holds the first push open until the test has killed the worker that sent it.
    started, release = hold_pushes(fx, tmp_path)
    ops = fx.commit_ops("crash", 6)
    gb = GitBatcherClient(
        client,
        GitBatchConfig(repo=str(fx.clone), max_batch_size=6, max_batch_age_seconds=3600,
                       heartbeat_timeout_seconds=2),
        task_queue,
    )
    args = ("--address", server_address, "--task-queue", task_queue, "--state-dir",
            str(tmp_path / "state"))
    first = WorkerProcess(*args, log=tmp_path / "worker1.log")
    await first.wait_started()
    for op in ops:
        await gb.enqueue(op)  # the sixth fills the batch: the push starts

    async def push_in_flight() -> None:
        assert started.exists(), "push has not reached the remote yet"

    await eventually(push_in_flight)
    first.kill_group()
    release.touch()
    # Each op was committed locally before the kill; the retry must not commit them again.
    assert all(git(fx.clone, "rev-list", "--count", f"main..{op.branch}") == "1" for op in ops)

    second = WorkerProcess(*args, log=tmp_path / "worker2.log")
    try:
        await second.wait_started()
        status = await landed_ops(gb, len(ops), timeout=60)
        history = await gb.handle.fetch_history()
    finally:
        second.kill_group()
    started_attempts = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    ]
    assert started_attempts == [2], "the push should have been retried once, on the second worker"
    assert_each_landed_once(fx, ops)
    assert status.stats.landed_ops == len(ops) and status.stats.total_batches == 1
    outcomes = status.executed_batches[0].outcomes
    assert sorted(o.op_id for o in outcomes) == sorted(op.id for op in ops)


async def test_ops_arriving_through_continue_as_new_land_once(
    client: Client, make_worker, task_queue: str, git_remote: GitRemoteFixture
):
    fx = git_remote
    ops = fx.commit_ops("can", 24)
    gb = GitBatcherClient(
        client,
        GitBatchConfig(repo=str(fx.clone), max_batch_size=4, max_batch_age_seconds=3600,
                       max_history_events=30),
        task_queue,
    )
    async with make_worker():
        for op in ops:
            await gb.enqueue(op)
            await gb.enqueue(op)  # repeats across the boundary are still ignored
        status = await landed_ops(gb, len(ops), timeout=60)
        description = await gb.handle.describe()
        save_history("git_batcher_after_continue_as_new",
                     (await gb.handle.fetch_history()).to_json())
        first_run = client.get_workflow_handle(
            gb.workflow_id, run_id=description.raw_description.workflow_execution_info.first_run_id
        )
        save_history("git_batcher_first_run_continued_as_new",
                     (await first_run.fetch_history()).to_json())
    assert status.runs > 1, "the workflow never continued as new"
    assert description.run_id != description.raw_description.workflow_execution_info.first_run_id
    assert status.stats.total_ops == len(ops)
    assert status.stats.pushes == len(ops) // 4
    assert_each_landed_once(fx, ops)


async def test_huge_and_deep_rejections_never_reach_continue_as_new(
    client: Client, make_worker, task_queue: str, git_remote: GitRemoteFixture
):
    """Rejected ops are kept as bounded previews, so a few 1.5 MB ops and a value
    nested 600 deep neither break `status` nor swell the continue-as-new input."""
    fx = git_remote
    ops = fx.commit_ops("after-junk", 4)
    gb = GitBatcherClient(
        client,
        GitBatchConfig(repo=str(fx.clone), max_batch_size=2, max_batch_age_seconds=3600,
                       max_history_events=20),
        task_queue,
    )
    deep: object = {"op_type": "push", "branch": "deep"}
    for _ in range(600):
        deep = [deep]
    async with make_worker():
        for i in range(3):
            await gb.enqueue(
                {"op_type": "push", "branch": f"huge-{i}", "message": "x" * (1536 * 1024)})
        await gb.enqueue(deep)
        for op in ops:
            await gb.enqueue(op)
        status = await landed_ops(gb, len(ops), timeout=60)
        history = await gb.handle.fetch_history()
    assert status.runs > 1, "the workflow never continued as new"
    assert status.stats.rejected_ops == 4 and len(status.rejected) == 4
    assert all(len(repr(r.op)) < 1000 for r in status.rejected)
    started = history.events[0].workflow_execution_started_event_attributes
    carried = sum(len(p.data) for p in started.input.payloads)
    assert carried < 64 * 1024, f"continue-as-new input is {carried} bytes"
    assert_each_landed_once(fx, ops)


async def test_flush_now_callers_are_handed_over_across_continue_as_new(
    client: Client, make_worker, task_queue: str, git_remote: GitRemoteFixture
):
    """Updates that wait on batches (`flush_now`) while the batcher keeps continuing as new: each
    call returns a real result (refused ones are sent again by the client), every op lands once."""

    fx = git_remote
    ops = fx.commit_ops("handover", 18)
    config = GitBatchConfig(repo=str(fx.clone), max_batch_size=3, max_batch_age_seconds=3600,
                            max_history_events=25)
    gb = GitBatcherClient(client, config, task_queue)
    async with make_worker():

        async def sender(part: list[GitOp]) -> list[str]:
            statuses = []
            for op in part:
                await gb.enqueue(op)
                statuses.append((await gb.flush_now()).status)
            return statuses

        results = await asyncio.gather(*(sender(ops[i::3]) for i in range(3)))
        status = await landed_ops(gb, len(ops), timeout=60)
    assert all(s in ("completed", "empty") for part in results for s in part), results
    assert status.runs > 1, "the workflow never continued as new"
    assert status.stats.failed_ops == 0 and status.stats.total_ops == len(ops)
    assert_each_landed_once(fx, ops)


@workflow.defn(name=GIT_BATCH_WORKFLOW)
class FailingTaskBatcher:
    """A worker whose batcher code fails every workflow task (a bad deploy, a stalled worker)."""

    @workflow.run
    async def run(self, *args: Any) -> None:
        raise RuntimeError("this worker's batcher fails its workflow tasks")


async def failed_attempts(gb: GitBatcherClient) -> int:
    """The attempt number of the batcher's pending workflow task (each failed attempt adds one)."""
    described = await gb.handle.describe()
    return described.raw_description.pending_workflow_task.attempt


async def test_a_flush_sent_while_the_batchers_task_fails_waits_for_a_worker_that_runs_it(
    client: Client, make_worker, task_queue: str, git_remote: GitRemoteFixture
):
    """After a failed workflow task the server refuses updates until a task completes; the client
    sends its `flush_now` again under the same update id, and a worker with sound code answers it
    once, with the op landed (a new id would find the batch already cut by the first send)."""
    fx = git_remote
    (op,) = fx.commit_ops("not-ready", 1)
    gb = GitBatcherClient(client, GitBatchConfig(repo=str(fx.clone), max_batch_age_seconds=3600),
                          task_queue)
    async with Worker(client, task_queue=task_queue, workflows=[FailingTaskBatcher],
                      workflow_runner=UnsandboxedWorkflowRunner()):
        await gb.enqueue(op)

        async def task_failed() -> None:
            events = [e async for e in gb.handle.fetch_history_events()]
            assert any(e.HasField("workflow_task_failed_event_attributes") for e in events), (
                "no failed task yet")

        await eventually(task_failed)
        before = await failed_attempts(gb)
        flushing = asyncio.create_task(gb.flush_now())

        async def update_met_failing_tasks() -> None:
            assert await failed_attempts(gb) >= before + 1, "the failing task has not run again yet"

        await eventually(update_met_failing_tasks, timeout=60)
    async with make_worker():
        result = await asyncio.wait_for(flushing, 60)
    assert [(o.op_id, o.status) for o in result.outcomes] == [(op.id, "landed")]
    assert_each_landed_once(fx, [op])
