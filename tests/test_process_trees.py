"""A task's whole process tree dies with its worker, and a retry never runs beside an earlier
attempt, with either mechanism (a PID namespace per command, or process groups with a watchdog).

Real worker processes, killed with SIGKILL or stopped with SIGSTOP (a worker cut off from the
server: alive, so nothing dies with it). Each task's first attempt holds an flock on a file of its
own, inherited by the two `sleep`s it leaves running; its retry asks for the same lock without
waiting, so a retry that started while any process of the first attempt still ran says so.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from taskfleet.activities.processes.process_trees import (
    MODE_GROUP,
    MODE_NAMESPACE,
    ProcessTreesUnavailable,
    detect,
)
from taskfleet.clients.orchestrator import start_board
from taskfleet.core.models.orchestrator import Board, TaskSpec
from tests.conftest import GitRemoteFixture, WorkerProcess, eventually, processes_with_environ

# kills workers of its own and waits out their leases
pytestmark = [pytest.mark.slow, pytest.mark.heavy(seconds=70, waits=True)]

TASKS = 6
# How long the server waits for a silent task before retrying it: long enough that a busy machine's
# worker never misses a heartbeat, which would start a second attempt beside the first.
HEARTBEAT_TIMEOUT = 10


def _namespaces_allowed() -> bool:
    try:
        detect(MODE_NAMESPACE)
    except ProcessTreesUnavailable:
        return False
    return True


MODES = [
    pytest.param(MODE_NAMESPACE, marks=pytest.mark.skipif(not _namespaces_allowed(),
                                                          reason="PID namespaces not permitted")),
    MODE_GROUP,
]


class Harness:
    def __init__(self, tmp_path: Path, server_address: str, task_queue: str, mode: str) -> None:
        self.root, self.mode = tmp_path, mode
        self.marker = f"TREE_TEST={uuid.uuid4().hex}"
        self.starts, self.locks, self.overlaps = (tmp_path / "starts", tmp_path / "locks",
                                                  tmp_path / "overlaps")
        self.starts.mkdir()
        self.locks.mkdir()
        self.args = ("--address", server_address, "--task-queue", task_queue,
                     "--process-trees", mode)
        self.workers: list[WorkerProcess] = []

    def board(self) -> Board:
        run = (
            f'exec 9>"{self.locks}/$TASKFLEET_TASK_ID"; '
            f'if [ -e "{self.starts}/$TASKFLEET_TASK_ID" ]; then '
            f'  flock -n 9 || echo "$TASKFLEET_TASK_ID" >> "{self.overlaps}"; '
            'echo retry > retry.txt; '
            f'else flock 9; touch "{self.starts}/$TASKFLEET_TASK_ID"; export {self.marker}; '
            f"  sh -c 'sleep 30 & sleep 30 & wait'; fi"
        )
        tasks = [TaskSpec(id=f"P{i}", run=run, verify="test -f retry.txt", timeout_seconds=120)
                 for i in range(TASKS)]
        return Board(tasks=tasks, name="trees", max_parallel=TASKS)

    def worker(self, name: str, *extra: str) -> WorkerProcess:
        worker = WorkerProcess(*self.args, *extra, "--state-dir", str(self.root / f"state-{name}"),
                               log=self.root / f"{name}.log")
        self.workers.append(worker)
        return worker

    def task_processes(self) -> list[int]:
        return processes_with_environ(self.marker)

    async def all_running(self) -> None:
        async def check() -> None:
            assert len(list(self.starts.iterdir())) == TASKS
            assert len(self.task_processes()) >= 3 * TASKS  # each: its shell, `sh -c`, two sleeps

        await eventually(check, timeout=90)

    def stop_all(self) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                os.kill(worker.proc.pid, signal.SIGCONT)
                worker.kill_group()
        for pid in self.task_processes():
            os.kill(pid, signal.SIGKILL)


async def _finish(client: Client, handle, harness: Harness) -> None:
    result = await asyncio.wait_for(handle.result(), 180)
    assert all(t.status == "succeeded" and t.landed
               for t in result.tasks), [(t.id, t.reason) for t in result.tasks]
    assert not harness.overlaps.exists(), (
        f"retries ran beside an earlier attempt: {harness.overlaps.read_text()}")


@pytest.mark.parametrize("mode", MODES)
async def test_a_killed_worker_leaves_no_task_process_and_no_retry_overlaps(
    client, server_address, task_queue, git_remote: GitRemoteFixture, tmp_path, mode
):
    harness = Harness(tmp_path, server_address, task_queue, mode)
    first = harness.worker("first")
    try:
        await first.wait_started()
        assert f"task processes: {mode}" in await _log_line(first, "task processes:")
        handle = await start_board(
            client, harness.board(), str(git_remote.clone), task_queue=task_queue,
            heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT, git_max_batch_age_seconds=0.2)
        await harness.all_running()
        os.kill(first.proc.pid, signal.SIGKILL)  # kill -9: no clean-up runs in the worker

        async def none_alive() -> None:
            assert harness.task_processes() == []

        await eventually(none_alive, timeout=2.0, interval=0.05)
        second = harness.worker("second")
        await second.wait_started()
        await _finish(client, handle, harness)
    finally:
        harness.stop_all()


@pytest.mark.parametrize("mode", MODES)
async def test_a_retry_ends_an_earlier_attempt_whose_worker_stopped_answering(
    client, server_address, task_queue, git_remote: GitRemoteFixture, tmp_path, mode
):
    """The first worker is stopped (SIGSTOP), not killed: nothing dies with it, its tasks' processes
    run on, and the server gives their tasks to the second worker once heartbeats stop. Each retry
    ends what its earlier attempt still runs before it starts, so none runs beside one."""
    harness = Harness(tmp_path, server_address, task_queue, mode)
    # With its six slots taken by the six tasks, the stopped worker has no activity poll open
    # that could swallow a retry (a stopped process's connection stays up).
    first = harness.worker("first", "--max-concurrent-activities", str(TASKS))
    try:
        await first.wait_started()
        handle = await start_board(
            client, harness.board(), str(git_remote.clone), task_queue=task_queue,
            heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT, git_max_batch_age_seconds=0.2)
        await harness.all_running()
        # polls the same queue; the running tasks stay with the first
        second = harness.worker("second")
        await second.wait_started()
        os.kill(first.proc.pid, signal.SIGSTOP)
        assert harness.task_processes(), "the stopped worker's tasks should still be running"
        await _finish(client, handle, harness)
        assert harness.task_processes() == []
        # the retries ended the first attempts
        assert "killed" in (tmp_path / "second.log").read_text()
    finally:
        harness.stop_all()


async def _log_line(worker: WorkerProcess, fragment: str) -> str:
    async def logged() -> str:
        lines = [line for line in worker.output().splitlines() if fragment in line]
        assert lines, f"no line with {fragment!r} yet"
        return lines[0]

    return await eventually(logged, timeout=30)


def test_the_mechanism_is_detected_once_and_forcing_the_fallback_works():
    group = detect(MODE_GROUP)
    assert group.mode == MODE_GROUP and not group.namespaced
    assert detect(MODE_GROUP) is group  # cached: the probe runs once per worker process
    with pytest.raises(ProcessTreesUnavailable, match="TASKFLEET_PROCESS_TREES"):
        detect("containers")
    if _namespaces_allowed():
        namespace = detect(MODE_NAMESPACE)
        assert namespace.namespaced and re.search(r"--pid --fork --kill-child --mount-proc",
                                                  namespace.why)
