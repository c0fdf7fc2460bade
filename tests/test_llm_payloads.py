"""Claude's prompts, replies and edits live in the payload store, never in workflow history: the
real dev server, the real `anthropic` client against the stand-in, real git, a real folder or a real
S3 API server (moto's, started here). A person reads them back with `taskfleet show`."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from taskfleet.activities.llm import SHARED_RULES
from taskfleet.clients.orchestrator import start_board
from taskfleet.core.boards import parse_toml_board
from taskfleet.core.llm_ids import judge_workflow_id, llm_batch_workflow_id, llm_task_workflow_id
from taskfleet.core.names import JUDGE_WORKFLOW
from taskfleet.core.settings import TaskfleetSettings
from taskfleet.testing.standin import StandIn
from tests.conftest import GitRemoteFixture, eventually, free_port, git
from tests.llm_support import payload_text, standin_env
from tests.s3_support import CREDENTIALS, s3_server
from tests.test_llm_tasks import assert_landed, llm_board
from tests.user_cli import taskfleet

pytestmark = pytest.mark.heavy(seconds=60, waits=True)


@pytest.fixture
def standin() -> Iterator[StandIn]:
    with standin_env() as server:
        yield server


def with_context(fx: GitRemoteFixture, size: int) -> None:
    """A context file of `size` bytes on the base every task reads."""
    fx.change(
        fx.clone,
        "ctx/spec.txt",
        "".join(f"line {i} of the spec\n" for i in range(size // 20))[:size],
    )
    git(fx.clone, "add", "ctx")
    git(fx.clone, "commit", "-qm", "spec")
    git(fx.clone, "push", "-q", "origin", "HEAD")


async def histories(client: Client, *workflow_ids: str) -> list:
    return [await client.get_workflow_handle(w).fetch_history() for w in workflow_ids]


async def test_histories_carry_keys_and_show_prints_prompt_and_reply(
    client, make_worker, task_queue, git_remote, standin, tmp_path, server_address
):
    with_context(git_remote, 50_000)
    board = parse_toml_board(
        llm_board(2, context=["ctx/*.txt"], judge="anthropic", llm_batch_max_age_seconds=0.5)
    )
    store = tmp_path / "store"
    async with make_worker(
        settings=TaskfleetSettings(state_dir=tmp_path / "state", payload_store=str(store))
    ):
        handle = await start_board(
            client, board, str(git_remote.clone), task_queue=task_queue, git_max_batch_age_seconds=1
        )
        result = await handle.result()
    assert_landed(result, git_remote)
    ids = [
        handle.id,
        llm_task_workflow_id(handle.id, "L1"),
        judge_workflow_id(handle.id, "L1", 1),
        llm_batch_workflow_id(task_queue),
    ]
    texts = [payload_text(h) for h in await histories(client, *ids)]
    for text in texts:  # no prompt, context file or rule text anywhere in history
        assert (
            "line 7 of the spec" not in text
            and SHARED_RULES[:60] not in text
            and "Task id: L1" not in text
        )
    assert '"message_ref"' in texts[1] and '"key"' in texts[1]
    assert sum(1 for _ in store.rglob("*") if _.is_file()) >= 6  # requests, replies, task inputs

    env = {**os.environ, "TASKFLEET_PAYLOAD_STORE": str(store)}
    shown = await taskfleet(server_address, "show", "L1", "--run", handle.id, cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert (
        "Task id: L1" in out and "line 7 of the spec" in out and SHARED_RULES[:60] in out
    )  # the prompt
    assert (
        "[tool_use apply_edits]" in out and '"path": "llm/L1.txt"' in out
    )  # the implementer's reply
    assert "[tool_use submit_review]" in out and "approve" in out  # the judge's request and reply
    as_json = await taskfleet(
        server_address, "show", "L1", "--run", handle.id, "--json", cwd=tmp_path, env=env
    )
    calls = json.loads(as_json.stdout)
    assert [c["request"]["tool_choice"]["name"] for c in calls] == ["apply_edits", "submit_review"]
    assert all(
        c["reply"]["type"] == "succeeded" and c["reply"]["message"]["content"] for c in calls
    )

    gone = await taskfleet(server_address, "show", "L9", "--run", handle.id, cwd=tmp_path, env=env)
    assert gone.returncode == 1 and "no Claude calls found for task L9" in gone.stderr


async def test_a_corrupted_prompt_fails_its_task_naming_the_key_and_the_rest_lands(
    client, make_worker, task_queue, git_remote, standin, tmp_path
):
    store = tmp_path / "store"
    board = parse_toml_board(llm_board(2, llm_batch_max_age_seconds=3, max_attempts=1))
    async with make_worker(
        settings=TaskfleetSettings(state_dir=tmp_path / "state", payload_store=str(store))
    ):
        handle = await start_board(
            client, board, str(git_remote.clone), task_queue=task_queue, git_max_batch_age_seconds=1
        )

        async def l1_prompt() -> Path:  # stored, submitted, not yet in a batch (its age is 3 s)
            found = [
                p for p in store.rglob("*") if p.is_file() and b"Task id: L1\\n" in p.read_bytes()
            ]
            assert found
            return found[0]

        prompt = await eventually(l1_prompt, timeout=30, interval=0.02)
        prompt.write_bytes(prompt.read_bytes().replace(b"Task id: L1", b"Task id: XX"))
        result = await handle.result()
    by_id = {t.id: t for t in result.tasks}
    assert by_id["L1"].status == "failed" and prompt.name in by_id["L1"].reason, by_id["L1"]
    assert "corrupted" in by_id["L1"].reason and str(store) in by_id["L1"].reason
    assert by_id["L2"].status == "succeeded" and by_id["L2"].landed
    assert [r["task"] for r in standin.requests] == ["L2"]  # never a silently changed prompt


async def test_batches_are_cut_at_the_configured_api_limits(
    client, make_worker, task_queue, git_remote, standin, tmp_path, monkeypatch
):
    monkeypatch.setenv("TASKFLEET_LLM_BATCH_MAX_REQUESTS", "2")
    async with make_worker():  # the batcher takes its limits from the worker that starts it
        board = parse_toml_board(llm_board(5, llm_batch_max_age_seconds=2))
        handle = await start_board(
            client, board, str(git_remote.clone), task_queue=task_queue, git_max_batch_age_seconds=1
        )
        result = await handle.result()
    assert_landed(result, git_remote)
    assert sorted(standin.batch_sizes()) == [1, 2, 2]


async def test_an_s3_store_end_to_end_and_an_unreachable_one_fails_naming_it(
    client, make_worker, task_queue, git_remote, standin, tmp_path, server_address
):
    with s3_server(tmp_path) as s3:
        settings = TaskfleetSettings(
            state_dir=tmp_path / "state", payload_store="s3://payloads/fleet"
        )
        async with make_worker(settings=settings):
            board = parse_toml_board(llm_board(2, judge="anthropic", llm_batch_max_age_seconds=0.5))
            handle = await start_board(
                client,
                board,
                str(git_remote.clone),
                task_queue=task_queue,
                git_max_batch_age_seconds=1,
            )
            result = await handle.result()
        assert_landed(result, git_remote)
        keys = [
            o["Key"]
            for o in s3.client().list_objects_v2(Bucket="payloads", Prefix="fleet/")["Contents"]
        ]
        assert len(keys) >= 6 and all(k.startswith("fleet/") for k in keys)
        shown = await taskfleet(
            server_address,
            "show",
            "L2",
            "--run",
            handle.id,
            "--store",
            "s3://payloads/fleet",
            cwd=tmp_path,
            env={**os.environ},
        )
        assert shown.returncode == 0 and "Task id: L2" in shown.stdout, shown.stderr

    nowhere = f"http://127.0.0.1:{free_port()}"
    os.environ.update({**CREDENTIALS, "AWS_ENDPOINT_URL": nowhere})
    try:
        settings = TaskfleetSettings(
            state_dir=tmp_path / "state2", payload_store="s3://payloads/gone"
        )
        async with make_worker(settings=settings):
            board = parse_toml_board(llm_board(1, llm_batch=False))
            result = await (
                await start_board(
                    client,
                    board,
                    str(git_remote.clone),
                    task_queue=task_queue,
                    git_max_batch_age_seconds=1,
                )
            ).result()
    finally:
        for key in (*CREDENTIALS, "AWS_ENDPOINT_URL"):
            os.environ.pop(key, None)
    task = result.tasks[0]
    assert (
        task.status == "failed" and "payload store s3://payloads/gone is unreachable" in task.reason
    ), task


async def test_prune_removes_old_payloads_and_keeps_what_an_open_run_may_read(
    client, task_queue, tmp_path, server_address
):
    from taskfleet.activities.model_io.payload_store import LocalStore

    store = LocalStore(tmp_path / "store")
    old = [store.put(f"old {i}".encode()) for i in range(2)]
    fresh = store.put(b"stored just now")
    month_ago = time.time() - 40 * 86_400
    for ref in old:
        os.utime(tmp_path / "store" / ref.key[:2] / ref.key, (month_ago, month_ago))
    # An open run (no worker serves its queue): what was stored since it started must stay.
    open_run = await client.start_workflow(
        JUDGE_WORKFLOW, {}, id=f"open-{task_queue}", task_queue=task_queue
    )
    try:
        args = ("payloads", "prune", "--store", str(tmp_path / "store"))
        dry = await taskfleet(
            server_address, *args, "--older-than-days", "30", "--dry-run", cwd=tmp_path
        )
        assert dry.returncode == 0 and "would remove 2 payload(s)" in dry.stdout, dry.stderr
        assert store.get(old[0]) == b"old 0"
        done = await taskfleet(server_address, *args, "--older-than-days", "0", cwd=tmp_path)
    finally:
        await open_run.terminate()
    assert done.returncode == 0, done.stderr
    assert "is still open" in done.stdout and "removed 2 payload(s)" in done.stdout, done.stdout
    assert store.get(fresh) == b"stored just now"
    bad = await taskfleet(server_address, *args, "--older-than-days", "-1", cwd=tmp_path)
    assert bad.returncode == 2 and "--older-than-days must be 0 or more" in bad.stderr
