"""The main job from the command line: `taskfleet demo`, `taskfleet run|status|cancel`,
`lessons`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from taskfleet.cli.demo import DEMO_TASK_QUEUE
from taskfleet.cli.run import run_succeeded
from taskfleet.clients.git_batcher import GitBatcherClient
from taskfleet.clients.orchestrator import progress
from taskfleet.core.models.git_batch import GitBatchConfig
from taskfleet.core.models.orchestrator import OrchestratorResult, OrchestratorStats, TaskOutcome
from taskfleet.devserver.server import find_temporal_cli
from tests.conftest import ROOT, GitRemoteFixture, eventually, python_cmd


async def cli(address: str, *args: str, task_queue: str = "taskfleet",
              timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = python_cmd("-m", "taskfleet.cli", "--address", address, "--task-queue", task_queue, *args)
    proc = await asyncio.create_subprocess_exec(
        *cmd, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return subprocess.CompletedProcess(cmd, proc.returncode, out.decode(), err.decode())


@pytest.mark.smoke
async def test_demo_runs_the_example_board_with_one_push(server_address: str, tmp_path: Path):
    # As a person with TEMPORAL_ADDRESS set runs it: no --address, the server they already run is
    # used.
    env = {**os.environ, "TEMPORAL_ADDRESS": server_address}
    proc = await asyncio.create_subprocess_exec(
        *python_cmd("-m", "taskfleet.cli", "demo", "--state-dir", str(tmp_path / "state"),
                    "--no-wait"),
        cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    done = subprocess.CompletedProcess("taskfleet demo", proc.returncode,
                                       out.decode(), err.decode())
    assert done.returncode == 0, done.stdout + done.stderr
    # the user's server, kept up: not one of ours
    assert f"--address {server_address} status" in done.stdout
    assert "pushes:   1 for 9 landed tasks" in done.stdout
    assert "Web UI:   http://localhost:" in done.stdout
    speedup = float(done.stdout.split("speed-up: ")[1].split("x")[0])
    assert speedup >= 4
    workflow_id = done.stdout.split(" as ")[1].split()[0]
    listed = subprocess.run([find_temporal_cli(), "workflow", "list", "--address", server_address,
                             "--query", f'WorkflowId="{workflow_id}"'], capture_output=True,
                            text=True, timeout=30)
    assert workflow_id in listed.stdout and "Completed" in listed.stdout
    clone = tmp_path / "state" / "demo" / "clone"
    assert (clone / ".git").is_dir()
    # Nothing left that looks broken: the demo's batcher is not left Running without a worker ...
    async def batcher_ended() -> str:
        listed = subprocess.run(
            [find_temporal_cli(), "workflow", "list", "--address", server_address, "--query",
             f'WorkflowType="GitBatchWorkflow" AND TaskQueue="{DEMO_TASK_QUEUE}"'],
            capture_output=True, text=True, timeout=30,
        )
        assert ("taskfleet-git-clone-origin" in listed.stdout
                and "Running" not in listed.stdout), listed.stdout
        return listed.stdout

    assert "Terminated" in await eventually(batcher_ended, timeout=30)
    # ... and `status` on the finished run answers at once, with no worker (the demo's has stopped).
    shown = await cli(server_address, "status", workflow_id, timeout=20)
    assert (shown.returncode == 0 and "COMPLETED" in shown.stdout
            and "9/9 done" in shown.stdout), shown.stderr
    assert shown.stderr == ""
    # The closing hint names commands that run as printed (the server it points at is still up).
    assert f"status {workflow_id}" in done.stdout and "workflow list --address" in done.stdout


async def test_run_status_and_refused_board(server_address, task_queue, make_worker,
                                            git_remote: GitRemoteFixture, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('run = "true"\nverify = "true"\n[[tasks]]\nid = "A"\n[[tasks]]\nid = "A"\n')
    refused = await cli(server_address, "run", str(bad), "--repo", str(git_remote.clone),
                        task_queue=task_queue)
    assert refused.returncode == 2 and "duplicate task id A" in refused.stderr

    board = ROOT / "examples" / "board-example.md"
    async with make_worker():
        ran = await cli(
            server_address, "run", str(board), "--repo", str(git_remote.clone), "--json",
            "--id", f"run-{task_queue}",
            "--run", 'echo "$TASKFLEET_TASK_ID" >> tasks-done.txt',
            "--verify", 'grep -q "$TASKFLEET_TASK_ID" tasks-done.txt',
            task_queue=task_queue,
        )
        assert ran.returncode == 0, ran.stderr
        result = json.loads(ran.stdout)
        # readme-badge is [x] already
        assert [t["id"] for t in result["tasks"]] == ["changelog", "license-header", "done-file"]
        assert all(t["landed"] for t in result["tasks"])
        assert {"wall_seconds", "task_seconds", "speedup", "pushes",
                "network_savings"} <= set(result["stats"])
        assert result["workflow_id"] == f"run-{task_queue}"  # what `status` and `cancel` take
        shown = await cli(server_address, "status", result["workflow_id"], "--json",
                          task_queue=task_queue)
        status = json.loads(shown.stdout)
        assert status["status"] == "COMPLETED" and status["counts"]["landed"] == 3
        # board order, as `run --json`
        assert [t["id"] for t in status["tasks"]] == ["changelog", "license-header", "done-file"]
        stats = await cli(server_address, "lessons", "stats", "--json", task_queue=task_queue)
        assert json.loads(stats.stdout)["lessons"] == 0
    assert git_remote.remote_ref("task/done-file")


async def test_after_a_cancel_run_and_status_still_say_what_ran_and_landed(
    server_address, task_queue, make_worker, client, git_remote: GitRemoteFixture, tmp_path
):
    """A cancelled run has no result, but `run --json` and `status` still list its tasks: the
    worker answers the closed run's `progress` from its history (landed as the remote has it)."""
    board = tmp_path / "board.toml"
    board.write_text(
        'name = "cancel-me"\nverify = "true"\n'
        '[[tasks]]\nid = "quick"\nrun = "echo q > q.txt"\n'
        '[[tasks]]\nid = "slow"\nrun = "sleep 300.7"\n'
    )
    workflow_id = f"cancel-{task_queue}"
    async with make_worker():
        running = asyncio.create_task(cli(server_address, "run", str(board), "--repo",
                                          str(git_remote.clone), "--json", "--id", workflow_id,
                                          task_queue=task_queue))
        handle = client.get_workflow_handle(workflow_id)

        async def quick_done() -> None:
            try:  # the CLI may not have started the run yet
                done = (await progress(handle)).counts.get("succeeded")
            except RPCError as err:
                raise AssertionError(err.message) from None
            assert done == 1

        await eventually(quick_done, timeout=60)
        cancelled = await cli(server_address, "cancel", workflow_id, task_queue=task_queue)
        assert cancelled.returncode == 0, cancelled.stderr
        ran = await running
        assert ran.returncode == 1 and "did not complete" in ran.stderr
        shown = json.loads(ran.stdout)
        assert shown["status"] == "CANCELED"
        tasks = {t["id"]: t for t in shown["tasks"]}
        assert tasks["quick"]["status"] == "succeeded" and tasks["quick"]["landed"] is True
        assert tasks["slow"]["status"] == "cancelled" and not tasks["slow"]["landed"]
        assert git_remote.remote_ref("task/quick") and not git_remote.remote_ref("task/slow")
        status = await cli(server_address, "status", workflow_id, "--json", task_queue=task_queue)
        assert status.returncode == 1  # closed without a result
        assert {t["id"]: t["landed"] for t in json.loads(status.stdout)["tasks"]} == {
            "quick": True, "slow": False}
        text = await cli(server_address, "status", workflow_id, task_queue=task_queue)
        assert "CANCELED" in text.stdout and "quick" in text.stdout and "landed" in text.stdout


async def test_small_mistakes_on_the_command_line_are_one_line_each(
        server_address, task_queue, make_worker, git_remote, tmp_path):
    """A zero window, a refused lessons query, cancelling a run that has ended: one line,
    no traceback."""
    board = tmp_path / "b.toml"
    board.write_text('name = "m"\nrun = "true"\nverify = "true"\n[[tasks]]\nid = "m1"\n')
    zero = await cli(server_address, "run", str(board), "--repo", str(git_remote.clone),
                     "--max-parallel", "0", task_queue=task_queue)
    assert zero.returncode == 2 and "max_parallel" in zero.stderr and "Traceback" not in zero.stderr
    async with make_worker():
        bad = await cli(server_address, "lessons", "query", "--seen-after", "notadate",
                        task_queue=task_queue)
        assert bad.returncode == 2 and "notadate" in bad.stderr and "Traceback" not in bad.stderr
        ran = await cli(server_address, "run", str(board), "--repo", str(git_remote.clone),
                        "--json", "--id", f"ended-{task_queue}", task_queue=task_queue)
        assert ran.returncode == 0, ran.stderr
    again = await cli(server_address, "cancel", f"ended-{task_queue}", task_queue=task_queue)
    assert (again.returncode == 1 and "nothing to cancel" in again.stderr
            and "COMPLETED" in again.stderr)


async def test_status_exits_as_run_does_and_takes_connection_flags_after_the_command(
        server_address, task_queue, make_worker, git_remote, tmp_path):
    """0 while nothing failed, 1 once a task failed, 2 when the run cannot be asked about; the
    connection flags work after the command as well as before it."""
    board = tmp_path / "mixed.toml"
    board.write_text('name = "mixed"\nrun = "true"\n[[tasks]]\nid = "good"\nverify = "true"\n'
                     '[[tasks]]\nid = "bad"\nverify = "false"\n')
    async with make_worker():
        ran = await cli(server_address, "run", str(board), "--repo", str(git_remote.clone),
                        "--json", "--id", f"mixed-{task_queue}", task_queue=task_queue)
    assert ran.returncode == 1, ran.stderr
    after = python_cmd("-m", "taskfleet.cli", "status", f"mixed-{task_queue}", "--address",
                       server_address, "--task-queue", task_queue)
    shown = subprocess.run(after, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert shown.returncode == 1, shown.stderr
    assert "COMPLETED" in shown.stdout and "1 failed" in shown.stdout
    missing = await cli(server_address, "status", f"nothing-{task_queue}", "--json",
                        task_queue=task_queue)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert json.loads(missing.stdout)["error"].startswith(f"no run nothing-{task_queue}")


async def test_status_and_cancel_refuse_a_workflow_that_is_not_a_board_run(
        client, server_address, task_queue, git_remote):
    """A batcher's id given to `status` or `cancel` is one line and exit 2; the batcher runs on."""
    gb = GitBatcherClient(client, GitBatchConfig(repo=str(git_remote.clone)), task_queue)
    await gb.enqueue(git_remote.commit_ops("not-a-run", 1)[0])
    for command in ("status", "cancel"):
        done = await cli(server_address, command, gb.workflow_id, task_queue=task_queue)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
        assert "GitBatchWorkflow, not a board run (`taskfleet git status` shows it)" in done.stderr
    assert (await gb.handle.describe()).status == WorkflowExecutionStatus.RUNNING
    await gb.handle.terminate("test over")


async def test_a_namespace_the_server_does_not_have_is_named_as_such(server_address, tmp_path):
    """Not "no run X": the namespace itself is missing, and the line says how to mend it."""
    for args in (("status", "some-run"), ("git", "status", "--repo", str(tmp_path))):
        done = await cli(server_address, "--namespace", "no-such-namespace", *args)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
        assert "has no namespace 'no-such-namespace'" in done.stderr, done.stderr
        assert "temporal operator namespace create --namespace no-such-namespace" in done.stderr


def test_a_run_whose_commit_never_landed_did_not_succeed():
    landed = TaskOutcome(id="a", status="succeeded", commit="abc", landed=True)
    stranded = TaskOutcome(id="b", status="succeeded", commit="def", reason="not landed in 300s")
    unchanged = TaskOutcome(id="c", status="succeeded")  # nothing to land
    result = OrchestratorResult(tasks=[landed, unchanged], stats=OrchestratorStats())
    assert run_succeeded(result)
    result.tasks.append(stranded)
    assert not run_succeeded(result)
