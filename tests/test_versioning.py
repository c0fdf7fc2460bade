"""Worker Versioning on the dev server, with real worker processes.

A v1 worker starts a board whose tasks wait for a gate; v2 is made current with the `temporal`
CLI (the commands README's rollout uses); the running board stays on v1 (OrchestratorWorkflow is
PINNED) and finishes there, while a board started afterwards runs on v2. Which worker ran a task
is told by its log path: each worker has its own state folder.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import VersioningBehavior
from temporalio.client import Client
from temporalio.common import VersioningBehavior as DeclaredBehavior
from temporalio.workflow import _Definition

from taskfleet.clients.orchestrator import start_board
from taskfleet.core.models.lessons import LessonsAnswer
from taskfleet.core.models.orchestrator import Board, TaskSpec
from taskfleet.core.names import LESSONS_QUERY_WORKFLOW
from taskfleet.devserver.server import find_temporal_cli
from taskfleet.workflows.git_batcher import GitBatchWorkflow
from taskfleet.workflows.lessons_query import LessonsQueryWorkflow
from taskfleet.workflows.orchestrator import OrchestratorWorkflow
from tests.conftest import WorkerProcess, eventually


def deployment_cli(server_address: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(find_temporal_cli()), "worker", "deployment", *args, "--address", server_address],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )


async def make_current(server_address: str, deployment: str, build_id: str) -> None:
    """set-current-version, retried until the server has seen the version's workers poll."""

    async def set_current() -> None:
        done = deployment_cli(server_address, "set-current-version", "--deployment-name",
                              deployment, "--build-id", build_id, "--yes")
        assert done.returncode == 0, done.stderr + done.stdout

    await eventually(set_current, timeout=60, interval=0.5)


def gated_board(name: str, gate: Path, started: Path) -> Board:
    run = f'touch "{started}/$TASKFLEET_TASK_ID"; while [ ! -e "{gate}" ]; do sleep 0.05; done'
    tasks = [TaskSpec(id=f"{name}{i}", run=run, verify="true", worktree=False, timeout_seconds=300)
             for i in range(2)]
    return Board(tasks=tasks, name=name, max_parallel=2)


async def versioning_info(handle):
    return (await handle.describe()).raw_description.workflow_execution_info.versioning_info


async def test_running_board_stays_on_v1_new_board_runs_on_v2(
        tmp_path: Path, server_address: str, task_queue: str, git_remote):
    deployment = f"taskfleet-{uuid.uuid4().hex[:8]}"
    gate, started = tmp_path / "gate", tmp_path / "started"
    started.mkdir()
    states = {v: tmp_path / f"state-{v}" for v in ("v1", "v2")}

    def worker(build_id: str) -> WorkerProcess:
        return WorkerProcess("--address", server_address, "--task-queue", task_queue,
                             "--state-dir", str(states[build_id]), "--deployment-name", deployment,
                             "--build-id", build_id, log=tmp_path / f"{build_id}.log")

    client = await Client.connect(server_address)
    workers = [worker("v1")]
    try:
        await workers[0].wait_started()
        assert f"deployment_version={deployment}.v1" in workers[0].output()
        await make_current(server_address, deployment, "v1")
        old = await start_board(client, gated_board("old", gate, started), str(git_remote.clone),
                                task_queue=task_queue)

        async def tasks_started(*ids: str) -> None:
            assert {p.name for p in started.iterdir()} >= set(ids)

        await eventually(lambda: tasks_started("old0", "old1"), timeout=60)

        workers.append(worker("v2"))
        await workers[1].wait_started()
        await make_current(server_address, deployment, "v2")
        described = deployment_cli(server_address, "describe", "--name", deployment)
        assert described.returncode == 0 and "v2" in described.stdout, described.stderr

        new = await start_board(client, gated_board("new", gate, started), str(git_remote.clone),
                                task_queue=task_queue)
        await eventually(lambda: tasks_started("new0", "new1"), timeout=60)
        gate.touch()
        old_result, new_result = await old.result(), await new.result()

        for result, build_id in ((old_result, "v1"), (new_result, "v2")):
            assert [t.status for t in result.tasks] == ["succeeded", "succeeded"], result.tasks
            for task in result.tasks:
                assert Path(task.log_path).is_relative_to(states[build_id]), (
                    task.id, task.log_path)
        for handle, build_id in ((old, "v1"), (new, "v2")):
            info = await versioning_info(handle)
            assert info.behavior == VersioningBehavior.VERSIONING_BEHAVIOR_PINNED
            assert (info.deployment_version.deployment_name,
                    info.deployment_version.build_id) == (deployment, build_id)
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.interrupt()


async def test_declared_behaviors_do_not_break_an_unversioned_worker(
        client, make_worker, task_queue):
    """The SDK sends a defn's versioning behavior with every completion and the server refuses it
    from an unversioned worker; the plugin clears it there (taskfleet/versioning.py)."""
    declared = {cls: _Definition.must_from_class(cls).versioning_behavior
                for cls in (OrchestratorWorkflow, GitBatchWorkflow, LessonsQueryWorkflow)}
    assert declared == {OrchestratorWorkflow: DeclaredBehavior.PINNED,
                        GitBatchWorkflow: DeclaredBehavior.AUTO_UPGRADE,
                        LessonsQueryWorkflow: DeclaredBehavior.AUTO_UPGRADE}
    async with make_worker():
        answer = await asyncio.wait_for(client.execute_workflow(
            LESSONS_QUERY_WORKFLOW, None, id=f"lessons-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue, result_type=LessonsAnswer), timeout=30)
    assert answer.stats is not None
