"""Cancel in about a second: a cancelled run's tasks stop (process groups killed,
worktrees removed, nothing landed) without waiting for the SDK's heartbeat throttle.

A cancel reaches a running activity only in the answer to a heartbeat; with the SDK's default
throttle that is up to 0.8 x the 30 s heartbeat timeout = 24 s. The plugin lowers the throttle
to 1 s (TaskfleetPlugin.configure_worker). The latency itself is a benchmark figure
(benchmarks/cancel.py); here the bound only tells "throttle lowered" from "24 s throttle".
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import WorkflowFailureError

from taskfleet.clients.orchestrator import start_board
from taskfleet.core.models.orchestrator import Board, TaskSpec
from taskfleet.plugin import TaskfleetPlugin
from tests.conftest import eventually, processes_with_environ

# Well under the 24 s a cancel waited before: proves the throttle, not a speed.
CANCEL_BOUND_SECONDS = 12


def running_board(pids: Path, n: int) -> Board:
    # The marker lets the test find the tasks' processes in /proc (`$$` is namespace-local).
    run = f'echo $$ > "{pids}/$TASKFLEET_TASK_ID"; export CANCEL_TEST={pids.name}; exec sleep 600'
    tasks = [TaskSpec(id=f"C{i}", run=run, verify="true", timeout_seconds=3600) for i in range(n)]
    return Board(tasks=tasks, name="cancel", max_parallel=n)


async def test_cancel_stops_running_tasks_without_waiting_for_the_heartbeat_throttle(
    client, make_worker, task_queue, git_remote, settings, tmp_path
):
    pids = tmp_path / f"pids-{uuid.uuid4().hex[:10]}"
    pids.mkdir()
    async with make_worker() as worker:
        handle = await start_board(client, running_board(pids, 3), str(git_remote.clone),
                                   task_queue=task_queue)

        async def all_running() -> None:
            assert len(list(pids.iterdir())) == 3

        await eventually(all_running, timeout=60)

        async def all_heartbeated() -> None:
            # After a first heartbeat the SDK holds the next for the throttle interval: the cancel
            # must come after it, or the first heartbeat alone would carry it whatever the throttle.
            pending = (await handle.describe()).raw_description.pending_activities
            assert len(pending) == 3 and all(a.HasField("last_heartbeat_time") for a in pending)

        await eventually(all_heartbeated, timeout=60)
        assert len(processes_with_environ(f"CANCEL_TEST={pids.name}")) == 3
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), CANCEL_BOUND_SECONDS)
        assert (worker.config(active_config=True)["max_heartbeat_throttle_interval"]
                == timedelta(seconds=1))
    assert processes_with_environ(f"CANCEL_TEST={pids.name}") == []
    worktrees = settings.worktrees_dir
    assert not worktrees.exists() or [p for p in worktrees.rglob("*")
                                      if p.is_dir() and p.parent.parent == worktrees] == []
    for i in range(3):
        assert not git_remote.remote_ref(f"task/C{i}")


async def test_a_throttle_the_user_chose_is_kept(client, task_queue, settings):
    from temporalio.worker import Worker

    ours = Worker(client, task_queue=task_queue, plugins=[TaskfleetPlugin(settings)])
    theirs = Worker(client, task_queue=task_queue + "-theirs", plugins=[TaskfleetPlugin(settings)],
                    max_heartbeat_throttle_interval=timedelta(seconds=5))
    assert (ours.config(active_config=True)["max_heartbeat_throttle_interval"]
            == timedelta(seconds=1))
    assert (theirs.config(active_config=True)["max_heartbeat_throttle_interval"]
            == timedelta(seconds=5))
