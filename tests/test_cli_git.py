"""`taskfleet git enqueue|flush|status` against the real server, as a user would type them."""

from __future__ import annotations

import asyncio
import json
import subprocess

from taskfleet.clients.git_batcher import GitBatcherClient, git_batch_workflow_id
from taskfleet.core.models.git_batch import GitBatchConfig
from tests.conftest import ROOT, GitRemoteFixture, git, python_cmd


async def taskfleet(address: str, task_queue: str, *args: str) -> subprocess.CompletedProcess:
    """Run the CLI without blocking the event loop that the in-test worker runs on."""
    cmd = python_cmd("-m", "taskfleet.cli", "--address", address, "--task-queue", task_queue, *args)
    proc = await asyncio.create_subprocess_exec(
        *cmd, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return subprocess.CompletedProcess(cmd, proc.returncode, out.decode(), err.decode())


async def test_cli_enqueue_flush_status(server_address, task_queue, make_worker,
                                        git_remote: GitRemoteFixture):
    fx = git_remote
    repo = ["--repo", str(fx.clone)]
    wt = fx.worktree("cli/one")
    fx.change(wt, "one.txt", "one\n")
    async with make_worker():
        # Started with a long batch age, so the explicit flush below is what lands the op (on a busy
        # machine the CLI starts between enqueue and flush can outlast the default 5 s).
        sent = await taskfleet(server_address, task_queue, "git", "enqueue", *repo,
                               "--op-type", "commit", "--branch", "cli/one", "--message",
                               "from the cli", "--worktree", str(wt), "--id", "cli-1",
                               "--max-batch-age-seconds", "600")
        assert sent.returncode == 0, sent.stderr
        assert git_batch_workflow_id(str(fx.clone), "origin", task_queue) in sent.stdout

        bad = await taskfleet(server_address, task_queue, "git", "enqueue", *repo,
                              "--wait", "--branch=-x")
        assert bad.returncode == 1 and "starts with '-'" in bad.stderr

        flushed = await taskfleet(server_address, task_queue, "git", "flush", *repo,
                                  "--wait", "--json")
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


async def test_cli_retry_lands_a_failed_batch_and_refuses_an_unknown_one(
        server_address, task_queue, make_worker, git_remote: GitRemoteFixture, tmp_path):
    """`git retry` sends the batcher's `retry` update: a failed batch lands once its cause is gone;
    an id that names no failed batch is one line and exit 1."""
    clone = tmp_path / "later-clone"
    clone.mkdir()  # not a clone yet: the first push fails, and its batch is kept
    repo = ["--repo", str(clone)]
    async with make_worker():
        sent = await taskfleet(server_address, task_queue, "git", "enqueue", "main", *repo,
                               "--max-wait-seconds", "600")
        assert sent.returncode == 0, sent.stderr
        flushed = await taskfleet(server_address, task_queue, "git", "flush", *repo,
                                  "--wait", "--json")
        assert flushed.returncode == 1
        batch_id = json.loads(flushed.stdout)["batch_ids"][0]
        git(tmp_path, "clone", "-q", str(git_remote.remote), str(clone))
        retried = await taskfleet(server_address, task_queue, "git", "retry", batch_id, *repo)
        assert retried.returncode == 0, retried.stderr
        assert f"{batch_id}: completed" in retried.stdout
        unknown = await taskfleet(server_address, task_queue, "git", "retry", "batch-999", *repo)
        assert unknown.returncode == 1 and "not a failed batch" in unknown.stderr
        assert "Traceback" not in unknown.stderr


async def test_status_of_a_clone_no_batcher_ran_for_names_a_missing_folder(
        server_address, task_queue, tmp_path):
    missing = tmp_path / "no-such-clone"
    done = await taskfleet(server_address, task_queue, "git", "status", "--repo", str(missing))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"no git batcher {git_batch_workflow_id(str(missing), 'origin', task_queue)}" in (
        done.stderr)
    assert f"{missing} is not a folder here" in done.stderr


async def test_status_of_a_batcher_no_worker_serves_says_it_did_not_answer(
        client, server_address, task_queue, git_remote):
    """The batcher is there (started by a signal); with no worker on its queue its status query
    fails: that is not "no git batcher"."""
    gb = GitBatcherClient(client, GitBatchConfig(repo=str(git_remote.clone)), task_queue)
    await gb.enqueue(git_remote.commit_ops("unserved", 1)[0])
    done = await taskfleet(server_address, task_queue, "git", "status", "--repo",
                           str(git_remote.clone))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"the git batcher {gb.workflow_id} did not answer: " in done.stderr
    assert "no git batcher" not in done.stderr
    await gb.handle.terminate("test over")

