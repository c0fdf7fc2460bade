"""Taskfleet on a server nobody prepared (`temporal server start-dev` without our
search attributes)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError
from temporalio.worker import Worker

from taskfleet.clients.git_batcher import GitBatcherClient
from taskfleet.clients.orchestrator import start_board
from taskfleet.clients.search_attributes import ensure_search_attributes
from taskfleet.core.boards import parse_toml_board
from taskfleet.core.errors import StartupError
from taskfleet.core.models.git_batch import GitBatchConfig, GitOp
from taskfleet.core.names import ORCHESTRATOR_WORKFLOW
from taskfleet.core.search_attributes import ALL, is_unknown_search_attribute
from taskfleet.core.settings import TaskfleetSettings
from taskfleet.devserver.server import find_temporal_cli
from taskfleet.plugin import TaskfleetPlugin
from tests.conftest import GitRemoteFixture, eventually, free_port
from tests.user_cli import assert_one_line_refusal, taskfleet

BOARD = ('name = "plain"\nrun = "true"\nverify = "true"\n'
         '[[tasks]]\nid = "P1"\n[[tasks]]\nid = "P2"\n')


@pytest.fixture
async def plain_server(tmp_path: Path) -> AsyncIterator[str]:
    """`temporal server start-dev` on free ports, in memory, with no `--search-attribute` flag."""
    port, ui_port = free_port(), free_port()
    log = open(tmp_path / "plain-server.log", "wb")
    proc = subprocess.Popen(
        [find_temporal_cli(), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port),
         "--ui-port", str(ui_port), "--log-level", "error"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    address = f"127.0.0.1:{port}"

    async def answering() -> None:
        assert proc.poll() is None, (tmp_path / "plain-server.log").read_text()
        try:
            await Client.connect(address)
        except RuntimeError as err:
            raise AssertionError(str(err)) from None

    try:
        await eventually(answering, timeout=60, interval=0.2)
        yield address
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def custom_attributes(client: Client) -> set[str]:
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace))
    return set(listed.custom_attributes)


async def test_a_start_refused_for_missing_attributes_is_recognised_and_falls_back(
    plain_server: str, git_remote: GitRemoteFixture, tmp_path: Path
):
    client = await Client.connect(plain_server)
    assert not {k.name for k in ALL} & await custom_attributes(client)
    with pytest.raises(RPCError) as refused:
        await client.start_workflow(
            ORCHESTRATOR_WORKFLOW, None, id=f"refused-{uuid.uuid4().hex[:6]}", task_queue="nobody",
            search_attributes=TypedSearchAttributes(
                [SearchAttributePair(SearchAttributeKey.for_keyword("TaskfleetKind"), "x")]),
        )
    assert is_unknown_search_attribute(refused.value), refused.value.message
    # The clients fall back to starting without them (no worker needed to see the start succeed).
    handle = await start_board(client, parse_toml_board(BOARD), str(git_remote.clone),
                               task_queue="nobody")
    assert (await handle.describe()).status is not None
    batcher = GitBatcherClient(client, GitBatchConfig(repo=str(git_remote.clone)), "nobody")
    await batcher.enqueue(GitOp(op_type="push", branch="main"))
    assert (await batcher.handle.describe()).status is not None
    for h in (handle, batcher.handle):
        await h.terminate(reason="test over")
    # A worker with the plugin adds them where the operator API allows (a dev server does).
    async with Worker(client, task_queue="nobody",
                      plugins=[TaskfleetPlugin(TaskfleetSettings(state_dir=tmp_path / "state"))]):
        async def added() -> None:
            assert {k.name for k in ALL} <= await custom_attributes(client)

        await eventually(added, timeout=30)


async def test_run_and_enqueue_work_on_a_plain_dev_server(
        plain_server: str, git_remote: GitRemoteFixture, tmp_path: Path):
    user_dir = tmp_path / "elsewhere"
    user_dir.mkdir()
    board = user_dir / "board.toml"
    board.write_text(BOARD)
    task_queue = f"plain-{uuid.uuid4().hex[:8]}"
    enqueued = await taskfleet(plain_server, "git", "enqueue", "--repo", str(git_remote.clone),
                               "--branch", "main", cwd=user_dir, task_queue=task_queue)
    assert enqueued.returncode == 0 and "Traceback" not in enqueued.stderr, enqueued.stderr
    client = await Client.connect(plain_server)
    # the CLI added them (dev server allows it)
    assert {k.name for k in ALL} <= await custom_attributes(client)
    worker = Worker(client, task_queue=task_queue,
                    plugins=[TaskfleetPlugin(TaskfleetSettings(state_dir=tmp_path / "state"))])
    async with worker:
        ran = await taskfleet(plain_server, "run", str(board), "--repo", str(git_remote.clone),
                              "--json", cwd=user_dir, task_queue=task_queue)
    assert ran.returncode == 0, ran.stderr
    assert all(t["landed"] for t in json.loads(ran.stdout)["tasks"])
    assert git_remote.remote_ref("task/P2")


async def test_a_server_side_refusal_is_one_line_with_exit_code_2(
        plain_server: str, git_remote: GitRemoteFixture, tmp_path: Path):
    client = await Client.connect(plain_server, namespace="no-such-namespace")
    with pytest.raises(StartupError, match="namespace no-such-namespace does not exist"):
        await ensure_search_attributes(client)
    done = await taskfleet(plain_server, "git", "enqueue", "--repo", str(git_remote.clone),
                           "--branch", "main", cwd=tmp_path, namespace="no-such-namespace")
    line = assert_one_line_refusal(done, "no-such-namespace")
    assert line.startswith("taskfleet: ")
    started = time.monotonic()
    status = await taskfleet(plain_server, "status", "anything", cwd=tmp_path,
                             namespace="no-such-namespace")
    assert (status.returncode in (1, 2) and "Traceback" not in status.stderr
            and len(status.stderr.strip().splitlines()) == 1)
    assert time.monotonic() - started < 60


async def test_the_demo_on_a_plain_server_is_listed_as_a_board(plain_server: str,
                                                              tmp_path: Path):
    """The demo reusing a server nobody prepared adds the attributes before its run starts, so the
    tour's `temporal workflow list --query 'TaskfleetKind="board"'` finds the run."""
    done = await taskfleet(plain_server, "demo", "--no-wait", "--state-dir",
                           str(tmp_path / "state"), cwd=tmp_path, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = done.stdout.split(" as ")[1].split()[0]

    async def listed_as_a_board() -> None:
        listed = subprocess.run(
            [find_temporal_cli(), "workflow", "list", "--address", plain_server, "--query",
             'TaskfleetKind="board"'], capture_output=True, text=True, timeout=30)
        assert run_id in listed.stdout, listed.stdout + listed.stderr

    await eventually(listed_as_a_board, timeout=30)
