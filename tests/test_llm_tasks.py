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
from taskfleet.core.llm_ids import llm_batch_workflow_id
from taskfleet.core.models.llm import LLMBatchStatus
from taskfleet.core.models.orchestrator import OrchestratorResult
from taskfleet.core.names import QUERY_LLM_STATUS
from taskfleet.llm_standin import StandIn
from tests.conftest import GitRemoteFixture, git

FAST_POLLS = {"TASKFLEET_LLM_POLL_INITIAL_SECONDS": "0.2", "TASKFLEET_LLM_POLL_MAX_SECONDS": "0.5"}


@pytest.fixture
def standin() -> Iterator[StandIn]:
    """The stand-in, and the worker environment pointing at it (restored afterwards)."""
    server = StandIn().start()
    saved = {k: os.environ.get(k) for k in [*server.env(), *FAST_POLLS]}
    os.environ.update({**server.env(), **FAST_POLLS})
    try:
        yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


def llm_board(n: int, **settings: object) -> str:
    lines = ['name = "llm"', 'implementer = "anthropic"', 'verify = "test -f llm/$TASKFLEET_TASK_ID.txt"',
             'task_type = "llm-test"', "timeout_seconds = 60", "max_parallel = 8"]
    lines += [f"{k} = {str(v).lower() if isinstance(v, bool) else repr(v) if isinstance(v, str) else v}"
              for k, v in settings.items()]
    for i in range(1, n + 1):
        lines += ["", "[[tasks]]", f'id = "L{i}"', f'scope = "write llm/L{i}.txt"']
    return "\n".join(lines).replace("'", '"') + "\n"


async def run(client: Client, task_queue: str, fx: GitRemoteFixture, text: str, **options) -> OrchestratorResult:
    board = parse_toml_board(text)
    options.setdefault("git_max_batch_age_seconds", 1)
    handle = await start_board(client, board, str(fx.clone), task_queue=task_queue, **options)
    return await handle.result()


async def batcher_status(client: Client, task_queue: str) -> LLMBatchStatus:
    handle = client.get_workflow_handle(llm_batch_workflow_id(task_queue))
    return await handle.query(QUERY_LLM_STATUS, result_type=LLMBatchStatus)


def assert_landed(result: OrchestratorResult, fx: GitRemoteFixture) -> None:
    for t in result.tasks:
        assert t.status == "succeeded" and t.landed, t
        assert fx.remote_ref(f"task/{t.id}") == t.commit
        assert git(fx.remote, "show", f"{t.commit}:llm/{t.id}.txt") == t.id


async def test_three_tasks_make_one_batch_create(client, make_worker, task_queue, git_remote, standin):
    async with make_worker():
        result = await run(client, task_queue, git_remote, llm_board(3, llm_batch_max_size=3))
        status = await batcher_status(client, task_queue)
    assert_landed(result, git_remote)
    assert standin.calls["batches.create"] == 1 and standin.batch_sizes() == [3]
    assert standin.calls["messages.create"] == 0
    s = result.stats
    assert (s.llm_api_calls, s.llm_requests) == (1, 3), s
    assert s.llm_input_tokens > 0 and s.llm_output_tokens > 0 and s.llm_cost_usd > 0
    assert status.stats.batches_created == 1 and status.stats.results_delivered == 3
    assert all(t.llm_requests == 1 for t in result.tasks)
