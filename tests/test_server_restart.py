"""A clone used for a dozen boards on a dev server that is then restarted in memory (every workflow
history gone, the lease lock's tokens counting from 1 again) still takes the next board: its claim
is granted above what the clone's fence has seen at the first attempt, nothing waits, it lands.

The server is this test's own `temporal server start-dev` (in memory, its default), restarted on
the same port; the worker is a process that stays up across the restart, as a fleet's would.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import time
from pathlib import Path

import pytest
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client

from taskfleet.activities.git.branch_claims import claims_dir
from taskfleet.clients.orchestrator import start_board
from taskfleet.core.models.orchestrator import Board, TaskSpec
from taskfleet.core.search_attributes import dev_server_flags
from taskfleet.devserver.server import find_temporal_cli
from tests.conftest import GitRemoteFixture, WorkerProcess, eventually, free_port

pytestmark = pytest.mark.slow  # starts and restarts a server of its own

WRITE = 'echo "$TASKFLEET_TASK_ID" > "$TASKFLEET_TASK_ID.txt"'
BOARDS_BEFORE = 12


class InMemoryServer:
    def __init__(self, log: Path) -> None:
        self.port, self.ui_port, self.log = free_port(), free_port(), log
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> Client:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [find_temporal_cli(), "server", "start-dev", "--ip", "127.0.0.1", "--port",
                 str(self.port), "--ui-port", str(self.ui_port), "--headless", "--log-level",
                 "error", *dev_server_flags()], stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)

        async def up() -> Client:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                client = await Client.connect(self.address)
                await client.workflow_service.get_system_info(GetSystemInfoRequest())
                return client
            except Exception as err:  # noqa: BLE001 - not up yet
                raise AssertionError(str(err)) from None

        return await eventually(up, timeout=60, interval=0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


async def one_board(client: Client, task_id: str, fx: GitRemoteFixture,
                    queue: str) -> tuple[float, str]:
    board = Board(tasks=[TaskSpec(id=task_id, run=WRITE, verify="true")], name=f"restart-{task_id}",
                  max_parallel=1)
    started = time.monotonic()
    handle = await start_board(client, board, str(fx.clone), task_queue=queue,
                               git_max_batch_age_seconds=0.2)
    result = await asyncio.wait_for(handle.result(), 120)
    task = result.tasks[0]
    assert task.status == "succeeded" and task.landed, task
    return time.monotonic() - started, handle.id


async def test_a_clone_used_before_a_server_restart_takes_the_next_board_at_once(
    git_remote: GitRemoteFixture, tmp_path: Path
):
    server = InMemoryServer(tmp_path / "server.log")
    queue = "restart"
    worker = None
    try:
        client = await server.start()
        worker = WorkerProcess("--address", server.address, "--task-queue", queue, "--state-dir",
                               str(tmp_path / "state"), log=tmp_path / "worker.log")
        await worker.wait_started()
        before = [(await one_board(client, f"R{i}", git_remote, queue))[0]
                  for i in range(BOARDS_BEFORE)]
        fence = claims_dir(str(git_remote.clone)) / ".fence"
        seen = max(int(p.name) for p in fence.iterdir())
        assert seen >= BOARDS_BEFORE

        server.stop()
        client = await server.start()  # same port, in memory: every history is gone
        seconds, run_id = await one_board(client, "AFTER", git_remote, queue)
        events = [e async for e in client.get_workflow_handle(run_id).fetch_history_events()]

        async def presence_taken_again() -> None:
            # The worker's presence lock is gone too: its lease is taken again under the same
            # holder, so no other worker's sweep takes it for a dead worker's.
            assert "lease taken again" in worker.output()

        await eventually(presence_taken_again, timeout=60, interval=0.5)
    finally:
        if worker is not None:
            worker.kill_group()
        server.stop()
    print(f"\nboards before the restart: median {statistics.median(before):.2f} s, "
          f"max {max(before):.2f} s; first board after it: {seconds:.2f} s")
    attempts = {e.activity_task_started_event_attributes.attempt for e in events
                if e.HasField("activity_task_started_event_attributes")}
    assert attempts == {1}, "a claim or task was retried after the restart"
    markers = [int(p.name) for p in fence.iterdir()]
    # granted above the fence, one marker kept
    assert len(markers) == 1 and markers[0] > seen, (markers, seen)
    assert len(list(claims_dir(str(git_remote.clone)).glob("*.json"))) <= 1
