"""Fleet scale: a 20,000-task board runs with every payload small and bounded state.

The board goes by reference, tasks are loaded a page at a time, outcomes go to the run store; the
history-event cap is set low, so the run continues as new many times, and the recorded history of
every run is inspected.
"""

from __future__ import annotations

import pytest

from taskfleet.clients.board_store import store_board_file
from taskfleet.clients.orchestrator import progress, start_board
from taskfleet.clients.run_store import iter_run_outcomes
from tests.conftest import WorkerProcess
from tests.scale_support import PAYLOADS_LIMIT_BYTES, history_figures, page_starts, write_noop_board

pytestmark = pytest.mark.heavy(seconds=100)  # one of the longest files: `make test` starts it early

TASKS = 20_000


@pytest.mark.timeout(1800)
async def test_20000_tasks_run_with_every_payload_small_and_a_bad_task_on_page_7_fails_alone(
    client, server_address, task_queue, git_remote, tmp_path
):
    clean = store_board_file(write_noop_board(tmp_path / "clean.toml", TASKS),
                             str(git_remote.clone)).reference
    # a task on page 7 of the run's pages
    BAD = page_starts(str(git_remote.clone), clean.board_id, 7)[6] + 17
    path = write_noop_board(tmp_path / "big.toml", TASKS, max_parallel=200,
                            bad_rows={BAD: "run = 5"})
    stored = store_board_file(path, str(git_remote.clone))
    # The worker as users run it, in its own process (not sharing this test's event loop). Its task
    # processes die with it by process group: a PID namespace per command costs ~1.5 ms more CPU, a
    # minute over the board's 40,000 commands, and what dies with a worker is test_process_trees'.
    worker = WorkerProcess("--address", server_address, "--task-queue", task_queue, "--state-dir",
                           str(tmp_path / "worker-state"), "--max-concurrent-activities", "200",
                           "--process-trees", "process-group", log=tmp_path / "worker.log")
    try:
        await worker.wait_started()
        handle = await start_board(client, stored, str(git_remote.clone), task_queue=task_queue,
                                   max_history_events=1000)
        result = await handle.result()
        status = await progress(handle)
    finally:
        worker.kill_group()
    assert result.counts["succeeded"] == TASKS - 1 and result.counts["failed"] == 1, result.counts
    assert result.failed_ids == [f"n{BAD}"]
    # too many for the result: they are in the store
    assert result.recorded == TASKS and result.tasks == []
    assert status.counts == result.counts and status.total == TASKS and len(status.tasks) <= 20

    seen = 0
    for outcome in iter_run_outcomes(str(git_remote.clone), result.run_ref):
        seen += 1
        if outcome["id"] == f"n{BAD}":
            # the [[tasks]] line, 1-based
            header = path.read_text().splitlines().index(f'id = "n{BAD}"')
            assert outcome["status"] == "failed" and outcome["reason"] == (
                f"{path}:{header}: 'run' must be a string")
            assert outcome["row"] == BAD
        else:
            assert outcome["status"] == "succeeded", outcome
    assert seen == TASKS

    figures = await history_figures(client, handle.id)
    assert len(figures.runs) == result.stats.runs
    assert 5 <= result.stats.runs <= 200, result.stats.runs
    assert figures.largest_payload_bytes <= PAYLOADS_LIMIT_BYTES, figures.as_dict()
    # every run stops dispatching past the cap: none grows far beyond it
    assert figures.largest_history_events < 1000 + 400, figures.as_dict()
    first = figures.runs[0]
    assert first.largest_payload_bytes < PAYLOADS_LIMIT_BYTES / 2
