"""`taskfleet run --json` and `status --json` list every task of a run too big for its result,
streamed from the run store; the text summary says where they are."""

from __future__ import annotations

import json

from taskfleet.core.models.board_store import RESULT_MAX_TASKS
from tests.scale_support import write_noop_board
from tests.test_cli_run import cli

TASKS = RESULT_MAX_TASKS + 150


async def test_run_and_status_json_list_every_outcome_of_a_big_run(
        server_address, task_queue, make_worker, git_remote, tmp_path):
    bad = RESULT_MAX_TASKS + 3
    board = write_noop_board(tmp_path / "big.toml", TASKS, max_parallel=100,
                             bad_rows={bad: "run = false"})
    run_id = f"big-{task_queue}"
    async with make_worker(max_concurrent_activities=100):
        ran = await cli(server_address, "run", str(board), "--repo", str(git_remote.clone),
                        "--json", "--id", run_id, task_queue=task_queue, timeout=170)
        assert ran.returncode == 1, ran.stderr  # one task failed
        result = json.loads(ran.stdout)
        assert len(result["tasks"]) == TASKS and result["recorded"] == TASKS
        by_id = {t["id"]: t for t in result["tasks"]}
        assert len(by_id) == TASKS and by_id[f"n{bad}"]["status"] == "failed"
        assert "'run' must be a string" in by_id[f"n{bad}"]["reason"] and "row" not in by_id["n0"]
        assert result["counts"]["succeeded"] == TASKS - 1 and result["failed_ids"] == [f"n{bad}"]
        assert set(result["stats"]) >= {"wall_seconds", "runs", "pushes"}

        shown = await cli(server_address, "status", run_id, "--json", task_queue=task_queue)
        status = json.loads(shown.stdout)
        assert status["status"] == "COMPLETED" and status["counts"]["failed"] == 1
        assert sorted(t["id"] for t in status["tasks"]) == sorted(by_id)
        text = await cli(server_address, "status", run_id, task_queue=task_queue)
    assert f"{TASKS - 1} succeeded, 1 failed" in text.stdout and f"failed: n{bad}" in text.stdout
    assert f"taskfleet status {run_id} --json" in text.stdout
