"""Users drive the batcher with the official `temporal` CLI: the README's commands, for real."""

from __future__ import annotations

import asyncio
import json

from taskfleet.clients.git_batcher import git_batch_workflow_id
from taskfleet.devserver.server import find_temporal_cli
from tests.conftest import GitRemoteFixture, eventually


async def temporal(address: str, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        find_temporal_cli(), *args, "--address", address,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_signal_with_start_flush_and_query_from_temporal_cli(
    server_address: str, task_queue: str, make_worker, git_remote: GitRemoteFixture
):
    fx = git_remote
    wt = fx.worktree("cli/temporal")
    fx.change(wt, "t.txt", "from the temporal cli\n")
    wf = git_batch_workflow_id(str(fx.clone))
    op = {"op_type": "commit", "branch": "cli/temporal", "worktree": str(wt), "message": "via temporal", "id": "t-1"}
    async with make_worker():
        await temporal(
            server_address, "workflow", "signal-with-start", "--workflow-id", wf, "--type", "GitBatchWorkflow",
            "--task-queue", task_queue, "--input", json.dumps({"repo": str(fx.clone), "max_batch_age_seconds": 3600}),
            "--signal-name", "enqueue", "--signal-input", json.dumps(op),
        )
        await temporal(server_address, "workflow", "signal", "--workflow-id", wf, "--name", "enqueue",
                       "--input", json.dumps({"op_type": "push", "branch": "--force"}))

        async def queued() -> dict:
            out = await temporal(server_address, "workflow", "query", "--workflow-id", wf, "--name", "status", "-o", "json")
            status = json.loads(out)["queryResult"][0]
            assert len(status["queue"]) == 1 and len(status["rejected"]) == 1, status
            return status

        status = await eventually(queued)
        assert "starts with '-'" in status["rejected"][0]["reason"]
        out = await temporal(server_address, "workflow", "update", "execute", "--workflow-id", wf, "--name", "flush_now", "-o", "json")
        assert '"landed"' in out
    assert fx.remote_ref("cli/temporal")
    assert fx.pushes() == 1
