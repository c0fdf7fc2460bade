"""Claude tasks on pods: workers with private state dirs share one payload store (a real S3 API
server), and a payload store that fills up fails the task that filled it, with the reason, while the
next one lands. Each worker is `python worker.py` in its own mount namespace (tests/pods.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from taskfleet.clients.orchestrator import start_board
from taskfleet.core.models.orchestrator import Board, TaskSpec
from taskfleet.testing.standin import StandIn
from tests.conftest import ROOT, GitRemoteFixture, eventually, git, kill_process_group
from tests.llm_support import standin_env
from tests.pods import Pod, requires_pods
from tests.s3_support import s3_server

pytestmark = [requires_pods, pytest.mark.heavy(seconds=50, waits=True)]
VERIFY = "test -f llm/$TASKFLEET_TASK_ID.txt"


@pytest.fixture
def standin() -> Iterator[StandIn]:
    with standin_env() as server:
        yield server


def claude_task(task_id: str, **keys: object) -> TaskSpec:
    return TaskSpec(
        id=task_id,
        implementer="anthropic",
        verify=VERIFY,
        scope=f"write llm/{task_id}.txt",
        refresh=True,
        llm_batch_max_age_seconds=1,
        timeout_seconds=120,
        **keys,
    )


@pytest.mark.timeout(400)
async def test_pods_with_private_state_share_an_s3_payload_store(
    client: Client,
    server_address: str,
    task_queue: str,
    git_remote: GitRemoteFixture,
    standin,
    tmp_path: Path,
):
    with s3_server(tmp_path) as s3:
        env = {
            **s3.env(),
            **standin.env(),
            "TASKFLEET_PAYLOAD_STORE": "s3://payloads/pods",
            "TASKFLEET_LLM_POLL_INITIAL_SECONDS": "0.2",
            "TASKFLEET_LLM_POLL_MAX_SECONDS": "0.5",
        }
        pods = [
            Pod(
                f"pod-{i}",
                state_dir=tmp_path / "state",
                address=server_address,
                task_queue=task_queue,
                log=tmp_path / f"pod-{i}.log",
                env=env,
            )
            for i in range(2)
        ]
        try:
            await asyncio.gather(*(pod.wait_started() for pod in pods))
            tasks = [claude_task(f"P{i}", judge="anthropic") for i in range(8)]
            handle = await start_board(
                client,
                Board(tasks=tasks, name="pods", max_parallel=8),
                str(git_remote.clone),
                task_queue=task_queue,
                git_max_batch_age_seconds=0.5,
            )
            result = await asyncio.wait_for(handle.result(), 300)
        finally:
            for pod in pods:
                pod.stop()
        assert all(t.status == "succeeded" and t.landed for t in result.tasks), result.tasks
        logs = [pod.output() for pod in pods]
        assert all("payload store s3://payloads/pods" in log for log in logs)
        stored = s3.client().list_objects_v2(Bucket="payloads", Prefix="pods/")["KeyCount"]
        assert (
            stored >= 8 * 4
        )  # per task: its input, request, reply, and the judge's request, reply


@pytest.mark.timeout(300)
async def test_a_full_payload_store_fails_the_task_that_filled_it_and_the_next_lands(
    client: Client,
    server_address: str,
    task_queue: str,
    git_remote: GitRemoteFixture,
    standin,
    tmp_path: Path,
):
    fx = git_remote
    fx.change(fx.clone, "big.txt", "a line of a big file\n" * 100_000)  # 2.1 MB, in one prompt
    git(fx.clone, "add", "big.txt")
    git(fx.clone, "commit", "-qm", "big")
    git(fx.clone, "push", "-q", "origin", "HEAD")
    store = tmp_path / "store"  # a 1 MiB tmpfs, private to the worker
    store.mkdir()
    mount = 'mount -t tmpfs -o size=1m taskfleet-full "$1" && shift && exec "$@"'
    cmd = [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        mount,
        "full",
        str(store),
        sys.executable,
        str(ROOT / "worker.py"),
        "--address",
        server_address,
        "--task-queue",
        task_queue,
        "--state-dir",
        str(tmp_path / "state"),
    ]
    env = {
        **os.environ,
        "TASKFLEET_PAYLOAD_STORE": str(store),
        "TASKFLEET_LLM_CONTEXT_MAX_BYTES": "3000000",
    }
    log = open(tmp_path / "worker.log", "ab")
    worker = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    try:

        async def started() -> None:
            text = (tmp_path / "worker.log").read_text(errors="replace")
            assert worker.poll() is None, text[-3000:]
            assert "task_queue=" in text

        await eventually(started, timeout=60)
        board = Board(
            tasks=[
                claude_task("BIG", context=["big.txt"], llm_batch=False),
                claude_task("SMALL", llm_batch=False),
            ],
            name="full",
            max_parallel=1,
        )
        handle = await start_board(
            client, board, str(fx.clone), task_queue=task_queue, git_max_batch_age_seconds=0.5
        )
        result = await asyncio.wait_for(handle.result(), 200)
    finally:
        kill_process_group(worker, log)
    by_id = {t.id: t for t in result.tasks}
    assert by_id["BIG"].status == "failed" and "No space left on device" in by_id["BIG"].reason, (
        by_id["BIG"]
    )
    assert f"payload store {store}" in by_id["BIG"].reason
    assert by_id["SMALL"].status == "succeeded" and by_id["SMALL"].landed, by_id["SMALL"]
