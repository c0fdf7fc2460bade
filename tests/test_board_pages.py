"""Paged runs end to end: boards by reference or inline, the run store, cancel, landing across
continue-as-new. Real server, real worker, real git."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import WorkflowFailureError

from taskfleet.clients.orchestrator import progress, start_board
from taskfleet.clients.run_store import iter_run_outcomes
from taskfleet.core.models.orchestrator import (
    Board,
    OrchestratorInput,
    OrchestratorResult,
    TaskSpec,
)
from taskfleet.core.names import ORCHESTRATOR_WORKFLOW
from tests.conftest import eventually, git, save_history
from tests.scale_support import history_figures

WRITE = 'mkdir -p out && printf "%s\\n" "$TASKFLEET_TASK_ID" > "out/$TASKFLEET_TASK_ID.txt"'


def noop(n: int, prefix: str = "t", **kw) -> list[TaskSpec]:
    return [TaskSpec(id=f"{prefix}{i}", run="true", verify="true", worktree=False, **kw)
            for i in range(n)]


async def test_an_inline_board_started_by_hand_runs_paged(
        client, make_worker, task_queue, git_remote):
    board = Board(tasks=noop(5) + [TaskSpec(id="bad", run="exit 3", verify="true", worktree=False)],
                  name="by-hand", max_parallel=8)
    async with make_worker():
        handle = await client.start_workflow(
            ORCHESTRATOR_WORKFLOW, OrchestratorInput(board=board, repo=str(git_remote.clone)),
            id=f"by-hand-{uuid.uuid4().hex[:6]}", task_queue=task_queue,
            result_type=OrchestratorResult,
        )
        result = await handle.result()
        save_history("orchestrator_inline_paged", (await handle.fetch_history()).to_json())
    assert [t.id for t in result.tasks] == [f"t{i}" for i in range(5)] + ["bad"]  # board order
    assert result.counts["succeeded"] == 5 and result.failed_ids == ["bad"]
    stored = {o["id"]: o for o in iter_run_outcomes(str(git_remote.clone), result.run_ref)}
    assert stored["bad"]["reason"] == "executor exited with 3" and len(stored) == 6
    assert git(git_remote.clone, "for-each-ref", "--format=%(refname)",
               "refs/taskfleet/runs/").endswith(result.run_ref.rsplit("/", 1)[1])


async def test_an_inline_board_over_the_limit_is_refused_with_what_to_do(
        client, make_worker, task_queue, git_remote):
    board = Board(tasks=noop(300, scope="x" * 1000), name="too-big")
    async with make_worker():
        handle = await client.start_workflow(
            ORCHESTRATOR_WORKFLOW, OrchestratorInput(board=board, repo=str(git_remote.clone)),
            id=f"too-big-{uuid.uuid4().hex[:6]}", task_queue=task_queue,
        )
        with pytest.raises(WorkflowFailureError) as caught:
            await handle.result()
    message = str(caught.value.cause)
    assert "inline board may be at most 256 KB" in message and "taskfleet run" in message, message


async def test_landing_is_counted_across_continue_as_new(
        client, make_worker, task_queue, git_remote):
    tasks = [TaskSpec(id=f"W{i}", run=WRITE, verify="true", timeout_seconds=60)
             for i in range(8)] + noop(12, "n")
    async with make_worker():
        handle = await start_board(client, Board(tasks=tasks, name="mixed", max_parallel=4),
                                   str(git_remote.clone), task_queue=task_queue,
                                   max_history_events=60, git_max_batch_age_seconds=0.5)
        result = await handle.result()
        save_history("orchestrator_paged_continue_as_new", (await handle.fetch_history()).to_json())
    assert result.stats.runs > 1, result.stats
    assert result.counts["succeeded"] == 20 and result.counts["landed"] == 8, result.counts
    by_id = {t.id: t for t in result.tasks}
    for i in range(8):
        assert (by_id[f"W{i}"].landed
                and git_remote.remote_ref(f"task/W{i}") == by_id[f"W{i}"].commit)
    assert not any(by_id[f"n{i}"].landed for i in range(12))
    assert result.stats.pushes >= 1 and result.stats.network_savings == 8 - result.stats.pushes
    figures = await history_figures(client, handle.id)
    assert len(figures.runs) == result.stats.runs


async def test_cancelling_a_paged_run_records_what_ran_and_counts_the_rest(
        client, make_worker, task_queue, git_remote):
    tasks = [TaskSpec(id=f"s{i}", run="sleep 60", verify="true", worktree=False) for i in range(40)]
    async with make_worker():
        handle = await start_board(client, Board(tasks=tasks, name="cancel-me", max_parallel=4),
                                   str(git_remote.clone), task_queue=task_queue)

        async def four_running():
            p = await progress(handle)
            assert p.counts["running"] == 4, p.counts
            return p

        running = await eventually(four_running, timeout=60)
        assert running.total == 40 and running.run_ref and len(running.tasks) == 4
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    stored = list(iter_run_outcomes(str(git_remote.clone), running.run_ref))
    assert sorted(o["id"] for o in stored if o["reason"] == "cancelled") == sorted(running.running)
    assert all(o["status"] == "cancelled" for o in stored)
    assert len(stored) == 40  # the four that ran, and the 36 loaded but never started


@pytest.mark.parametrize("tamper", ["other_board", "skips_rows", "repeats_a_row"])
async def test_a_first_page_that_does_not_fit_its_board_is_dropped_and_the_page_loaded(
    client, make_worker, task_queue, git_remote, tamper
):
    """The first page rides in the input unchecked by any worker: one from another board, or whose
    rows do not add up, is not used; the run loads the page from the store and runs
    every task once."""
    from dataclasses import replace

    from taskfleet.clients.board_store import store_board

    stored = store_board(Board(tasks=noop(4), name="first-page"), str(git_remote.clone))
    page = stored.first_page
    if tamper == "other_board":  # a page of another board of the same size
        other = store_board(Board(tasks=noop(4, prefix="x"), name="other"), str(git_remote.clone))
        page = other.first_page
    elif tamper == "skips_rows":  # claims rows 0..3 with two tasks: rows 2 and 3 would never run
        page = replace(page, tasks=page.tasks[:2], rows=page.rows[:2])
    else:  # one task twice
        page = replace(page, tasks=[page.tasks[0], page.tasks[0], *page.tasks[2:]],
                       rows=[0, 0, 2, 3])
    async with make_worker():
        handle = await client.start_workflow(
            ORCHESTRATOR_WORKFLOW,
            OrchestratorInput(board=stored.settings, board_ref=stored.reference,
                              repo=str(git_remote.clone), first_page=page),
            id=f"first-page-{uuid.uuid4().hex[:6]}", task_queue=task_queue,
            result_type=OrchestratorResult,
        )
        result = await handle.result()
    assert [t.id for t in result.tasks] == ["t0", "t1", "t2", "t3"]
    assert all(t.status == "succeeded" for t in result.tasks) and result.recorded == 4
