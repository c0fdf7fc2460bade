"""`taskfleet git enqueue|flush|status` against the real server, as a user would type them."""

from __future__ import annotations

import asyncio
import json
import subprocess

from taskfleet.clients.git_batcher import git_batch_workflow_id
from tests.conftest import ROOT, GitRemoteFixture, python_cmd


async def taskfleet(address: str, task_queue: str, *args: str) -> subprocess.CompletedProcess:
    """Run the CLI without blocking the event loop that the in-test worker runs on."""
    cmd = python_cmd("-m", "taskfleet.cli", "--address", address, "--task-queue", task_queue, *args)
    proc = await asyncio.create_subprocess_exec(
        *cmd, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return subprocess.CompletedProcess(cmd, proc.returncode, out.decode(), err.decode())


async def test_cli_enqueue_flush_status(server_address, task_queue, make_worker, git_remote: GitRemoteFixture):
    fx = git_remote
    repo = ["--repo", str(fx.clone)]
    wt = fx.worktree("cli/one")
    fx.change(wt, "one.txt", "one\n")
    async with make_worker():
        # Started with a long batch age, so the explicit flush below is what lands the op (on a busy
        # machine the CLI starts between enqueue and flush can outlast the default 5 s).
        sent = await taskfleet(server_address, task_queue, "git", "enqueue", *repo, "--op-type", "commit",
                               "--branch", "cli/one", "--message", "from the cli", "--worktree", str(wt),
                               "--id", "cli-1", "--max-batch-age-seconds", "600")
        assert sent.returncode == 0, sent.stderr
        assert git_batch_workflow_id(str(fx.clone), "origin", task_queue) in sent.stdout

        bad = await taskfleet(server_address, task_queue, "git", "enqueue", *repo, "--wait", "--branch=-x")
        assert bad.returncode == 1 and "starts with '-'" in bad.stderr

        flushed = await taskfleet(server_address, task_queue, "git", "flush", *repo, "--wait", "--json")
        assert flushed.returncode == 0, flushed.stderr
        result = json.loads(flushed.stdout)
        assert [(o["op_id"], o["status"]) for o in result["outcomes"]] == [("cli-1", "landed")]

        shown = await taskfleet(server_address, task_queue, "git", "status", *repo, "--json")
        status = json.loads(shown.stdout)
        assert status["stats"]["total_ops"] == 1 and status["stats"]["pushes"] == 1
        human = await taskfleet(server_address, task_queue, "git", "status", *repo)
        assert "pushes 1" in human.stdout
    assert fx.remote_ref("cli/one")
    assert fx.pushes() == 1
