"""The Claude implementer end to end: real Temporal server, real git, the real `anthropic` client
talking HTTP to the bundled stand-in (`ANTHROPIC_BASE_URL`), nothing monkeypatched."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from taskfleet.clients.orchestrator import start_board
from taskfleet.core.boards import parse_toml_board
from taskfleet.core.llm_ids import llm_batch_workflow_id, llm_task_workflow_id
from taskfleet.core.models.llm import LLMBatchStatus
from taskfleet.core.models.orchestrator import OrchestratorResult
from taskfleet.core.names import QUERY_STATUS
from taskfleet.core.settings import TaskfleetSettings
from taskfleet.testing.standin import FAKE_API_KEY, StandIn
from tests.conftest import GitRemoteFixture, git, save_history
from tests.llm_support import payload_text, standin_env

# one of the longest files: `make test` starts it early
pytestmark = pytest.mark.heavy(seconds=35, waits=True)


@pytest.fixture
def standin() -> Iterator[StandIn]:
    with standin_env() as server:
        yield server


def llm_board(n: int, **settings: object) -> str:
    lines = ['name = "llm"', 'implementer = "anthropic"',
             'verify = "test -f llm/$TASKFLEET_TASK_ID.txt"', 'task_type = "llm-test"',
             "timeout_seconds = 60", "max_parallel = 8"]
    lines += [
        f"{k} = {str(v).lower() if isinstance(v, bool) else repr(v) if isinstance(v, str) else v}"
        for k, v in settings.items()]
    for i in range(1, n + 1):
        lines += ["", "[[tasks]]", f'id = "L{i}"', f'scope = "write llm/L{i}.txt"']
    return "\n".join(lines).replace("'", '"') + "\n"


async def run(client: Client, task_queue: str, fx: GitRemoteFixture, text: str,
              **options) -> OrchestratorResult:
    board = parse_toml_board(text)
    options.setdefault("git_max_batch_age_seconds", 1)
    handle = await start_board(client, board, str(fx.clone), task_queue=task_queue, **options)
    return await handle.result()


async def batcher_status(client: Client, task_queue: str) -> LLMBatchStatus:
    handle = client.get_workflow_handle(llm_batch_workflow_id(task_queue))
    return await handle.query(QUERY_STATUS, result_type=LLMBatchStatus)


def assert_landed(result: OrchestratorResult, fx: GitRemoteFixture) -> None:
    for t in result.tasks:
        assert t.status == "succeeded" and t.landed, t
        assert fx.remote_ref(f"task/{t.id}") == t.commit
        assert git(fx.remote, "show", f"{t.commit}:llm/{t.id}.txt") == t.id


@pytest.mark.smoke
async def test_three_tasks_make_one_batch_create(client, make_worker, task_queue,
                                                 git_remote, standin):
    async with make_worker():
        board = parse_toml_board(llm_board(3, llm_batch_max_size=3))
        # The replay test names a history's workflow by its file name, and the children's ids derive
        # from it: this run uses that name as its id (one per test session's fresh server).
        handle = await start_board(client, board, str(git_remote.clone), task_queue=task_queue,
                                   git_max_batch_age_seconds=1,
                                   workflow_id="orchestrator_llm_three")
        result = await handle.result()
        status = await batcher_status(client, task_queue)
        histories = [
            await handle.fetch_history(),
            await client.get_workflow_handle(llm_batch_workflow_id(task_queue)).fetch_history(),
            await client.get_workflow_handle(llm_task_workflow_id(handle.id, "L1")).fetch_history(),
        ]
    assert_landed(result, git_remote)
    for name, history in zip(("orchestrator_llm_three", "llm_batcher_three", "llm_task_batched"),
                             histories):
        save_history(name, history.to_json())
    texts = [payload_text(h) for h in histories]
    # The child holds the reply's key and the tool it called; the prompt stays in the payload store.
    assert '"tool_name":"apply_edits"' in texts[2] and '"message_ref"' in texts[2]
    assert all("Task id: L1" not in text for text in texts)
    for text in texts:  # the key stays in the worker's environment
        assert FAKE_API_KEY not in text and "ANTHROPIC_API_KEY" not in text
    assert standin.calls["batches.create"] == 1 and standin.batch_sizes() == [3]
    assert standin.calls["messages.create"] == 0
    s = result.stats
    assert (s.llm_api_calls, s.llm_requests) == (1, 3), s
    assert s.llm_input_tokens > 0 and s.llm_output_tokens > 0 and s.llm_cost_usd > 0
    assert status.stats.batches_created == 1 and status.stats.results_delivered == 3
    assert all(t.llm_requests == 1 for t in result.tasks)


async def test_results_out_of_order_and_an_unknown_custom_id_is_dropped(
        client, make_worker, task_queue, git_remote, standin):
    standin.out_of_order = True
    standin.extra_result_ids = ["stranger-never-submitted"]
    async with make_worker():
        result = await run(client, task_queue, git_remote, llm_board(3, llm_batch_max_size=3))
        status = await batcher_status(client, task_queue)
    order = [r["custom_id"] for r in standin.requests]
    assert_landed(result, git_remote)  # each task got its own edits although results came reversed
    assert (len(order) == 3 and status.stats.unknown_results == 1
            and status.stats.results_delivered == 3)


async def test_one_errored_and_one_expired(client, make_worker, task_queue, git_remote, standin):
    standin.script = {
        "L1": [{"result": "errored", "error": "prompt is too long: 250000 tokens > 200000"}],
        "L2": [{"result": "expired"}]}
    async with make_worker():
        result = await run(client, task_queue, git_remote,
                           llm_board(3, llm_batch_max_size=3, max_attempts=1))
        status = await batcher_status(client, task_queue)
    by_id = {t.id: t for t in result.tasks}
    assert (by_id["L1"].status == "failed"
            and "prompt is too long" in by_id["L1"].reason), by_id["L1"]
    # resubmitted once, then answered
    assert by_id["L2"].status == "succeeded" and by_id["L2"].landed
    assert by_id["L3"].status == "succeeded" and by_id["L3"].landed
    assert standin.batch_sizes() == [3, 1]  # the first flush, then the expired request alone
    assert [r["task"] for r in standin.requests].count("L2") == 2
    assert result.stats.llm_api_calls == 2 and status.stats.batches_created == 2


async def test_a_slow_batch_is_polled_until_it_ends(client, make_worker, task_queue,
                                                    git_remote, standin):
    standin.batch_polls = 4
    async with make_worker():
        result = await run(client, task_queue, git_remote, llm_board(2, llm_batch_max_size=2))
        status = await batcher_status(client, task_queue)
    assert_landed(result, git_remote)
    assert standin.calls["batches.create"] == 1
    assert status.stats.polls >= 5 and status.recent_batches[-1].polls >= 5, status.stats
    assert status.recent_batches[-1].next_poll_seconds > 0.2  # the interval grew


async def test_direct_mode_makes_one_call_per_request(client, make_worker, task_queue,
                                                      git_remote, standin):
    async with make_worker():
        result = await run(client, task_queue, git_remote, llm_board(3, llm_batch=False))
    assert_landed(result, git_remote)
    assert standin.calls["messages.create"] == 3 and standin.calls["batches.create"] == 0
    assert result.stats.llm_api_calls == 3 and result.stats.llm_requests == 3


async def test_state_dir_inside_the_clone_is_refused_naming_both(
        client, make_worker, task_queue, git_remote, standin):
    inside = TaskfleetSettings(state_dir=git_remote.clone / "state")
    async with make_worker(settings=inside):
        result = await run(client, task_queue, git_remote, llm_board(1, llm_batch=False))
    task = result.tasks[0]
    assert task.status == "failed" and not task.landed
    assert (str(git_remote.clone / "state") in task.reason
            and f"clone {git_remote.clone}" in task.reason), task.reason


async def test_a_fix_round_succeeds_and_the_failure_becomes_a_lesson(
        client, make_worker, task_queue, git_remote, standin, settings):
    wrong = [{"path": "llm/L1.txt", "old_text": "", "new_text": "not the id\n"}]
    standin.script = {"L1": [{"edits": wrong, "summary": "first try"}]}
    verify = ('grep -qx "$TASKFLEET_TASK_ID" llm/$TASKFLEET_TASK_ID.txt'
              ' || { echo "llm/$TASKFLEET_TASK_ID.txt is wrong" >&2; exit 3; }')
    text = llm_board(1, llm_batch=False).replace('verify = "test -f llm/$TASKFLEET_TASK_ID.txt"',
                                                 f"verify = '{verify}'")
    async with make_worker():
        board = parse_toml_board(text)
        handle = await start_board(client, board, str(git_remote.clone), task_queue=task_queue,
                                   git_max_batch_age_seconds=1)
        result = await handle.result()
        child = client.get_workflow_handle(llm_task_workflow_id(handle.id, "L1"))
        save_history("llm_task_fix_round", (await child.fetch_history()).to_json())
    assert_landed(result, git_remote)
    assert result.tasks[0].llm_requests == 2
    second = standin.requests[1]["params"]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    feedback = second[2]["content"][0]
    assert feedback["type"] == "tool_result" and feedback["is_error"] is True
    assert feedback["tool_use_id"] == second[1]["content"][1]["id"]
    assert "exited with 3" in feedback["content"] and "llm/L1.txt is wrong" in feedback["content"]
    lessons = Path(settings.lessons_path).read_text()
    assert "verify_failed" in lessons and "L1" in lessons


async def test_a_refused_edit_fails_the_attempt_with_its_reason(
        client, make_worker, task_queue, git_remote, standin):
    standin.script = {
        "L1": [{"edits": [{"path": ".git/config", "old_text": "", "new_text": "x"}]}] * 2}
    async with make_worker():
        result = await run(client, task_queue, git_remote, llm_board(1, llm_batch=False))
    t = result.tasks[0]
    assert t.status == "failed" and "attempt 2: edits refused" in t.reason and ".git" in t.reason, t
    assert not t.landed and git_remote.remote_ref("task/L1") is None


async def test_second_run_of_the_same_board_hits_the_cache(client, make_worker, task_queue,
                                                           git_remote, standin):
    text = llm_board(3, llm_batch_max_size=3)
    async with make_worker():
        first = await run(client, task_queue, git_remote, text)
        assert_landed(first, git_remote)
        calls = dict(standin.calls)
        second = await run(client, task_queue, git_remote, text)
    assert_landed(second, git_remote)
    assert dict(standin.calls) == calls and standin.api_calls == 1  # no API call the second time
    assert all(t.cache_hit for t in second.tasks) and second.stats.llm_api_calls == 0
    assert second.stats.cache_hits == 3



def with_context(text: str, globs: str) -> str:
    """The board with `context` on its first task only."""
    return text.replace("[[tasks]]", f"[[tasks]]\ncontext = {globs}", 1)


async def test_context_files_from_the_base_commit_go_into_the_request(
        client, make_worker, task_queue, git_remote, standin):
    git_remote.change(git_remote.clone, "notes.txt", "context line one\n")
    git(git_remote.clone, "add", "notes.txt")
    git(git_remote.clone, "commit", "-qm", "notes")
    async with make_worker():
        result = await run(client, task_queue, git_remote,
                           with_context(llm_board(1, llm_batch=False), '["*.txt"]'))
    assert_landed(result, git_remote)
    user = standin.requests[0]["params"]["messages"][0]["content"][0]["text"]
    assert '<file path="notes.txt">\ncontext line one\n' in user


async def test_context_over_the_size_cap_is_refused_naming_the_largest(
        client, make_worker, task_queue, git_remote, standin):
    os.environ["TASKFLEET_LLM_CONTEXT_MAX_BYTES"] = "10"
    try:
        async with make_worker():  # the worker reads its settings when it is built
            result = await run(client, task_queue, git_remote,
                               with_context(llm_board(2, llm_batch=False), '["*"]'))
    finally:
        del os.environ["TASKFLEET_LLM_CONTEXT_MAX_BYTES"]
    by_id = {t.id: t for t in result.tasks}
    assert (by_id["L1"].status == "failed"
            and "over the cap of 10" in by_id["L1"].reason), by_id["L1"]
    assert "largest:" in by_id["L1"].reason and "bytes)" in by_id["L1"].reason
    # L1 never reached the API
    assert by_id["L2"].landed and [r["task"] for r in standin.requests] == ["L2"]
