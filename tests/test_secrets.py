"""No task sees the worker's secrets: a worker process with credentials in its environment runs
command tasks (executor, verify, a scratch task) and a Claude task (apply, verify); none of the
credentials appears in any task's environment, any commit or object on the remote, any log, or any
workflow history. A variable the operator allows reaches the task that asks for it; a board that
asks for one the operator did not allow is refused before anything starts."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
from temporalio.client import Client

from taskfleet.testing.standin import StandIn
from tests.conftest import GitRemoteFixture, WorkerProcess, git, save_history
from tests.llm_support import FAST_POLLS
from tests.user_cli import taskfleet

pytestmark = pytest.mark.slow  # workers of its own, with credentials in their environment

CREDENTIALS = ("ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "TEMPORAL_API_KEY")

BOARD = """name = "secrets"
max_parallel = 4
timeout_seconds = 120

[[tasks]]
id = "E1"
run = "env > run-env.txt; printf '%s' \\"$ANTHROPIC_API_KEY$AWS_SECRET_ACCESS_KEY$GITHUB_TOKEN$TEMPORAL_API_KEY\\" > leak.txt"
verify = "env; env > verify-env.txt"

[[tasks]]
id = "E2"
env = ["NPM_TOKEN"]
run = "printf '%s' \\"$NPM_TOKEN\\" > npm.txt"
verify = "test -s npm.txt && env"

[[tasks]]
id = "E3"
worktree = false
run = "env"
verify = "env"

[[tasks]]
id = "L1"
implementer = "anthropic"
verify = "env > verify-env.txt; env; test -f llm/L1.txt"
"""  # noqa: E501 (a board's text)


def secrets() -> dict[str, str]:
    tag = uuid.uuid4().hex[:12]
    return {name: f"fake-{name.lower().replace('_', '-')}-{tag}" for name in CREDENTIALS}


async def histories_since(client: Client, since: datetime) -> dict[str, str]:
    """Every workflow run started since `since`: its whole history, payloads decoded."""
    out = {}
    query = f'StartTime >= "{since.strftime("%Y-%m-%dT%H:%M:%S")}Z"'
    async for wf in client.list_workflows(query):
        history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        raw = json.dumps(history.to_json_dict())
        decoded = []
        for event in history.to_json_dict().get("events", []):
            decoded.append(_decoded(event))
        out[f"{wf.id} {wf.run_id}"] = raw + "\n".join(decoded)
    return out


def _decoded(node) -> str:
    parts = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "data" and isinstance(value, str):
                try:
                    parts.append(base64.b64decode(value).decode(errors="replace"))
                except ValueError:
                    parts.append(value)
            else:
                parts.append(_decoded(value))
    elif isinstance(node, list):
        parts.extend(_decoded(item) for item in node)
    return "\n".join(parts)


def every_object(repo: Path) -> bytes:
    """The content of every object in a repository (commits, trees, blobs)."""
    import subprocess

    return subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo,
                          capture_output=True, check=True).stdout


async def test_no_credential_reaches_a_task_a_commit_a_log_or_a_history(
    client, server_address, task_queue, git_remote: GitRemoteFixture, tmp_path: Path
):
    values = secrets()
    npm = f"npm-allowed-{uuid.uuid4().hex[:8]}"
    state = tmp_path / "state"
    since = datetime.now(timezone.utc).replace(microsecond=0)
    with StandIn() as standin:
        worker_env = {
            **values, **FAST_POLLS, "ANTHROPIC_BASE_URL": standin.url, "TEMPORAL_TLS": "false",
            "NPM_TOKEN": npm, "TASKFLEET_TASK_ENV": "NPM_TOKEN",
        }
        worker = WorkerProcess("--address", server_address, "--task-queue", task_queue,
                               "--state-dir", str(state), log=tmp_path / "worker.log",
                               env=worker_env)
        try:
            await worker.wait_started()
            board = tmp_path / "board.toml"
            board.write_text(BOARD)
            # The replay test names a history's workflow by its file name (the Claude task's child
            # id derives from it): this run is recorded under the id it runs with.
            done = await taskfleet(server_address, "run", str(board), "--repo",
                                   str(git_remote.clone), "--json", "--id",
                                   "orchestrator_env_checked", cwd=tmp_path, task_queue=task_queue,
                                   timeout=240)
            result = json.loads(done.stdout)
            texts = await histories_since(client, since)
            run = client.get_workflow_handle(json.loads(done.stdout)["workflow_id"])
            save_history("orchestrator_env_checked", (await run.fetch_history()).to_json())
        finally:
            worker.interrupt()
        # the Claude task ran
        assert standin.calls["batches.create"] + standin.calls["messages.create"] >= 1

    tasks = {t["id"]: t for t in result["tasks"]}
    assert done.returncode == 0 and all(t["status"] == "succeeded" for t in tasks.values()), (
        done.stdout + done.stderr)
    assert all(tasks[i]["landed"] for i in ("E1", "E2", "L1")), tasks
    remote = git_remote.remote
    seen = git(remote, "show", f"{tasks['E1']['commit']}:run-env.txt")
    # the task's environment really was written
    assert "TASKFLEET_TASK_ID=E1" in seen and "PATH=" in seen
    assert git(remote, "show", f"{tasks['E1']['commit']}:leak.txt") == ""
    assert git(remote, "show", f"{tasks['E2']['commit']}:npm.txt") == npm  # allowed, and asked for
    # Verification's own output is never part of the change: it is in the task's log, not the
    # commit.
    assert "verify-env.txt" not in git(remote, "ls-tree", "-r", "--name-only",
                                       tasks["E1"]["commit"])
    assert "verify-env.txt" not in git(remote, "ls-tree", "-r", "--name-only",
                                       tasks["L1"]["commit"])

    objects = every_object(remote)
    logs = {p: p.read_bytes() for p in state.rglob("*") if p.is_file() and p.suffix != ".sqlite"}
    # the scratch task's `env` is logged, and so is the Claude task's verify `env`
    assert any(b"TASKFLEET_TASK_ID=E3" in data for data in logs.values())
    assert any(b"TASKFLEET_TASK_ID=L1" in data for data in logs.values())
    worker_log = (tmp_path / "worker.log").read_bytes()
    for name, value in values.items():
        # The value nowhere; the name never as an environment entry (`NAME=`): the board's own
        # command text names them, and that text is in logs and histories by design.
        for what in (value, f"{name}="):
            assert what.encode() not in objects, f"{what} is in an object on the remote"
            for path, data in logs.items():
                assert what.encode() not in data, f"{what} is in {path}"
            assert what.encode() not in worker_log, f"{what} is in the worker's log"
            for run, text in texts.items():
                assert what not in text, f"{what} is in the history of {run}"
    assert texts, "no workflow history was read"


async def test_a_board_asking_for_a_variable_the_operator_did_not_allow_is_refused_before_anything_starts(  # noqa: E501
    client, server_address, task_queue, git_remote: GitRemoteFixture, tmp_path: Path
):
    worker = WorkerProcess(
        "--address", server_address, "--task-queue", task_queue, "--state-dir",
        str(tmp_path / "state"), log=tmp_path / "worker.log",
        env={"AWS_SECRET_ACCESS_KEY": "aws-never", "TASKFLEET_TASK_ENV": "NPM_TOKEN,PIP_*"})
    marker = tmp_path / "ran"
    board = tmp_path / "board.toml"
    board.write_text(
        f'name = "greedy"\nrun = "touch {marker}"\nverify = "true"\n[[tasks]]\nid = "G1"\n'
        '[[tasks]]\nid = "G2"\nenv = ["AWS_SECRET_ACCESS_KEY", "NPM_TOKEN"]\n')
    try:
        await worker.wait_started()
        done = await taskfleet(server_address, "run", str(board), "--repo", str(git_remote.clone),
                               "--id", f"greedy-{task_queue}", cwd=tmp_path, task_queue=task_queue)
        handle = client.get_workflow_handle(f"greedy-{task_queue}")
        history = [e async for e in handle.fetch_history_events()]
        save_history("orchestrator_env_refused", (await handle.fetch_history()).to_json())
    finally:
        worker.interrupt()
    assert done.returncode == 1, (done.stdout, done.stderr)
    refused = [line for line in done.stderr.splitlines() if "board refused" in line]
    assert len(refused) == 1 and "Traceback" not in done.stderr, done.stderr
    line = refused[0]
    assert ("board refused: env AWS_SECRET_ACCESS_KEY: not allowed by this worker's "
            "TASKFLEET_TASK_ENV (NPM_TOKEN, PIP_*)" in line), line
    assert "aws-never" not in done.stderr
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in history
                 if e.HasField("activity_task_scheduled_event_attributes")]
    assert scheduled == ["taskfleet_check_task_env"], scheduled  # no claim, no task
    assert not marker.exists() and not git_remote.remote_ref("task/G1")
