"""The clone's claims folder stays as small as the runs still running: each claim first removes the
claims of runs that have ended (a folder from before the run ledgers is swept once, whole), and the
fence beside them keeps one marker, not one per token ever issued."""

from __future__ import annotations

import json

from taskfleet.clients.orchestrator import start_board
from taskfleet.core.models.orchestrator import Board, TaskSpec
from tests.conftest import GitRemoteFixture

WRITE = 'echo "$TASKFLEET_TASK_ID" > "$TASKFLEET_TASK_ID.txt"'


def one_task(task_id: str) -> Board:
    return Board(tasks=[TaskSpec(id=task_id, run=WRITE, verify="true")], name=f"claims-{task_id}",
                 max_parallel=1)


async def test_claims_of_ended_runs_are_removed_and_the_fence_keeps_one_marker(
    client, make_worker, task_queue, git_remote: GitRemoteFixture
):
    claims = git_remote.clone / ".git" / "taskfleet-claims"
    # What earlier versions left: a claim file per branch of long-finished runs, a marker per token.
    (claims / ".fence").mkdir(parents=True)
    for i in range(30):
        holder = {"branch": f"task/old{i}", "workflow_id": "taskfleet-run-gone-00000000",
                  "first_run_id": "gone"}
        (claims / f"{i:024x}.json").write_text(json.dumps(holder))
    for token in range(1, 18):
        (claims / ".fence" / f"{token:020d}").touch()
    async with make_worker():
        for i in range(5):
            result = await (
                await start_board(client, one_task(f"B{i}"), str(git_remote.clone),
                                  task_queue=task_queue, git_max_batch_age_seconds=0.2)).result()
            assert result.tasks[0].status == "succeeded" and result.tasks[0].landed, result.tasks[0]
            # only the run that just ended is left: the next claim removes it
            assert len(list(claims.glob("*.json"))) == 1
            assert len(list((claims / "runs").iterdir())) == 1
    held = json.loads(next(claims.glob("*.json")).read_text())
    assert held["branch"] == "task/B4"
    markers = sorted(p.name for p in (claims / ".fence").iterdir())
    # the lock granted above what the fence had seen
    assert len(markers) == 1 and int(markers[0]) > 17, markers
