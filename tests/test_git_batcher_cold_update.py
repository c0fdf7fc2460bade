"""An op submitted by update to a batcher no worker holds in memory (a worker restarted) replays.

A worker that takes up a workflow cold replays its history and then handles the new update. The
SDK can hand it the update together with the last recorded task when that task sent no command
(here: a push's result, after a `flush` that arrived while the push ran), and runs the update
first. The batcher's choices must not depend on that order, or the history it writes would not
replay: a flush covers the ops queued when it was asked, never one accepted after it.
"""

from __future__ import annotations

from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Replayer

from taskfleet import TaskfleetPlugin
from taskfleet.clients.git_batcher import GitBatcherClient
from taskfleet.core.models.git_batch import GitBatchConfig
from taskfleet.core.settings import TaskfleetSettings
from taskfleet.testing import GitRemoteFixture
from tests.conftest import eventually, hold_pushes, landed_ops, save_history


async def _settled_after(gb: GitBatcherClient, event_type: int) -> None:
    """The batcher has completed a workflow task after the last event of `event_type`."""
    events = (await gb.handle.fetch_history()).events
    last = max(i for i, e in enumerate(events) if e.event_type == event_type)
    assert any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
               for e in events[last:]), "the batcher has not handled it yet"


async def test_update_to_a_cold_batcher_after_a_flush_during_a_push_replays(
    client: Client, make_worker, task_queue: str, git_remote: GitRemoteFixture,
    settings: TaskfleetSettings, tmp_path: Path,
):
    fx = git_remote
    # The first push waits on the remote until the test lets it go; later pushes pass.
    started, release = hold_pushes(fx, tmp_path)
    first_op, late_op = fx.commit_ops("cold", 2)
    # No age flush within the test: only a flush lands what is queued.
    gb = GitBatcherClient(
        client, GitBatchConfig(repo=str(fx.clone), max_batch_age_seconds=3600), task_queue)

    async with make_worker():
        await gb.enqueue(first_op)
        await gb.flush()

        async def push_waits() -> None:
            assert started.exists(), "the push has not reached the remote yet"

        await eventually(push_waits)
        await gb.flush()  # nothing queued: a flush that covers nothing
        await eventually(
            lambda: _settled_after(gb, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED))
        release.touch()
        await landed_ops(gb, 1)
        await eventually(
            lambda: _settled_after(gb, EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED))

    async with make_worker():  # a new worker: the batcher is replayed, then gets the update
        assert await gb.submit(late_op) == late_op.id
        status = await gb.status()
        assert [op.id for op in status.queue] == [late_op.id], (
            "the flush asked before the op arrived must not push it")
        await gb.flush()
        status = await landed_ops(gb, 2)
        history = await gb.handle.fetch_history()
    save_history("git_batcher_cold_update", history.to_json())

    assert status.stats.landed_ops == 2
    assert fx.remote_ref(late_op.branch), "the late op never landed"
    failed = [e for e in history.events
              if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
    assert not failed, failed[0].workflow_task_failed_event_attributes.failure.message
    result = await Replayer(workflows=[], plugins=[TaskfleetPlugin(settings)]).replay_workflow(
        history, raise_on_replay_failure=False)
    assert result.replay_failure is None, str(result.replay_failure)
