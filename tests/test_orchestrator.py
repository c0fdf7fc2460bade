"""OrchestratorWorkflow end to end: real server, real worktrees, real commands, real bare remote."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError

from taskfleet.clients.orchestrator import progress, start_board
from taskfleet.core.boards import BoardError, parse_toml_board
from taskfleet.core.models.orchestrator import Board, OrchestratorResult, TaskSpec
from tests.conftest import (
    GitRemoteFixture,
    WorkerProcess,
    eventually,
    git,
    processes_with_environ,
    save_history,
)

# one of the longest files: `make test` starts it early
pytestmark = pytest.mark.heavy(seconds=30, waits=True)

# A real change made by a real command, checked by a real test command.
WRITE = 'mkdir -p out && printf "%s\\n" "$TASKFLEET_TASK_ID" > "out/$TASKFLEET_TASK_ID.txt"'
CHECK = 'grep -qx "$TASKFLEET_TASK_ID" "out/$TASKFLEET_TASK_ID.txt"'


def board(n: int, run: str = WRITE, verify: str = CHECK, **kw) -> Board:
    tasks = [TaskSpec(id=f"T{i}", scope=f"Task {i}: write a file", branch=f"task/T{i}", run=run,
                      verify=verify, task_type="demo", timeout_seconds=60) for i in range(1, n + 1)]
    return Board(tasks=tasks, name="test", **kw)


async def run_board(client: Client, task_queue: str, fx: GitRemoteFixture, b: Board,
                    **options) -> OrchestratorResult:
    options.setdefault("git_max_batch_age_seconds", 60)
    handle = await start_board(client, b, str(fx.clone), task_queue=task_queue, **options)
    return await handle.result()


def leftover_worktrees(settings) -> list[Path]:
    root = settings.worktrees_dir
    return ([p for p in root.rglob("*") if p.is_dir() and p.parent.parent == root] if root.exists()
            else [])


async def test_nine_tasks_run_in_parallel_and_land_in_one_push(
        client, make_worker, task_queue, git_remote, settings):
    b = board(9, run=WRITE + " && sleep 0.5", max_parallel=9)
    async with make_worker():
        handle = await start_board(client, b, str(git_remote.clone), task_queue=task_queue,
                                   git_max_batch_age_seconds=60)
        result = await handle.result()
        save_history("orchestrator_nine_tasks", (await handle.fetch_history()).to_json())
    assert [t.status for t in result.tasks] == ["succeeded"] * 9
    assert all(t.landed for t in result.tasks)
    # speed-up is over the tasks' own work (a figure for benchmarks/, not asserted here)
    stats = result.stats
    assert stats.max_running == 9 and stats.work_seconds >= 9 * 0.5, stats
    assert stats.speedup == round(stats.work_seconds / stats.wall_seconds, 2), stats
    assert stats.overhead_seconds_per_task > 0 and stats.setup_seconds > 0, stats
    assert result.stats.pushes == 1 and git_remote.pushes() == 1
    assert result.stats.network_savings == 8
    for t in result.tasks:
        assert git_remote.remote_ref(f"task/{t.id}") == t.commit
        assert git(git_remote.remote, "show", f"{t.commit}:out/{t.id}.txt") == t.id
        assert f"Taskfleet-Task: {t.id}" in git(git_remote.remote, "log", "-1",
                                                "--format=%B", t.commit)
    assert leftover_worktrees(settings) == []
    assert git(git_remote.clone, "worktree", "list", "--porcelain").count("worktree ") == 1


async def test_tasks_start_from_the_remote_base_the_clone_saw_move_ahead(
        client, make_worker, task_queue, git_remote):
    """Main was pushed from this clone without its local main moving (the merge queue lands that
    way): tasks start from the remote's main, and their merges land on it."""
    fx = git_remote
    elsewhere = fx.branch_with("elsewhere", {"elsewhere.txt": "landed elsewhere\n"})
    git(fx.clone, "push", "-q", "origin", f"{elsewhere}:refs/heads/main")
    assert git(fx.clone, "rev-parse", "main") != elsewhere
    b = board(2, verify=CHECK + " && test -f elsewhere.txt", land="merge")
    async with make_worker():
        result = await run_board(client, task_queue, fx, b)
    assert [(t.status, t.landed) for t in result.tasks] == [("succeeded", True)] * 2, result.tasks
    git(fx.remote, "merge-base", "--is-ancestor", elsewhere, "main")
    assert git(fx.clone, "rev-parse", "main") == fx.remote_ref("main")


async def test_the_board_s_last_tasks_ask_to_land_together(client, make_worker,
                                                           task_queue, git_remote):
    """Tasks started once none was left to start name the landing ops of all tasks then running
    (theirs included): the batcher flushes when those are all queued, without waiting for the run
    to finish. Earlier tasks name none; the board still lands in one push per batch."""
    b = board(4, max_parallel=2)
    async with make_worker():
        handle = await start_board(client, b, str(git_remote.clone), task_queue=task_queue,
                                   git_max_batch_age_seconds=60)
        result = await handle.result()
        together: dict[str, list[str]] = {}
        async for event in handle.fetch_history_events():
            if event.HasField("activity_task_scheduled_event_attributes"):
                scheduled = event.activity_task_scheduled_event_attributes
                if scheduled.activity_type.name.endswith("run_task"):
                    task_input = json.loads(scheduled.input.payloads[0].data)
                    together[task_input["task"]["id"]] = task_input.get("land_together", [])
        save_history("orchestrator_last_tasks_land_together",
                     (await handle.fetch_history()).to_json())
    assert all(t.landed for t in result.tasks) and result.stats.pushes == 1
    assert together["T1"] == together["T2"] == together["T3"] == []
    # T4 and the one task still running when it started (at most max_parallel), as landing op ids
    run_key = [op_id for op_id in together["T4"] if op_id.endswith("/T4")][0].removesuffix("/T4")
    assert 1 <= len(together["T4"]) <= 2 and together["T4"] == sorted(together["T4"]), together
    assert {op_id.removeprefix(run_key + "/") for op_id in together["T4"]} <= {
        "T1", "T2", "T3", "T4"}


async def test_max_parallel_two_is_never_exceeded(client, make_worker, task_queue,
                                                  git_remote, tmp_path):
    running = tmp_path / "running"
    running.mkdir()
    seen = tmp_path / "seen"
    watch = (
        f'touch "{running}/$TASKFLEET_TASK_ID"; ls "{running}" | wc -l >> "{seen}"; sleep 0.3; '
        f'ls "{running}" | wc -l >> "{seen}"; rm "{running}/$TASKFLEET_TASK_ID"; ' + WRITE
    )
    async with make_worker():
        result = await run_board(client, task_queue, git_remote,
                                 board(6, run=watch, max_parallel=2))
    counts = [int(x) for x in seen.read_text().split()]
    assert max(counts) == 2, counts
    assert result.stats.max_running == 2
    assert all(t.status == "succeeded" for t in result.tasks)


async def test_failed_verification_fails_one_task_and_records_a_lesson(
        client, make_worker, task_queue, git_remote, settings):
    b = board(3)
    b.tasks[1].verify = "echo 'expected 42 got 41' >&2; exit 1"
    async with make_worker(settings=settings):
        result = await run_board(client, task_queue, git_remote, b)
    by_id = {t.id: t for t in result.tasks}
    assert (by_id["T2"].status == "failed" and "exited with 1" in by_id["T2"].reason
            and not by_id["T2"].landed)
    assert by_id["T1"].landed and by_id["T3"].landed
    assert not git_remote.remote_ref("task/T2")
    lines = settings.lessons_path.read_text().splitlines()
    assert (len(lines) == 1 and '"failure_type":"verify_failed"' in lines[0]
            and "expected 42 got 41" in lines[0])


async def test_timeout_and_crash_fail_with_reasons_and_leave_no_worktree(
        client, make_worker, task_queue, git_remote, settings):
    b = board(3)
    b.tasks[0].run, b.tasks[0].timeout_seconds = "sleep 30", 1
    b.tasks[1].run = "echo dying >&2; kill -9 $$"
    async with make_worker():
        result = await run_board(client, task_queue, git_remote, b)
    by_id = {t.id: t for t in result.tasks}
    assert by_id["T1"].status == "failed" and "timed out after 1s" in by_id["T1"].reason
    assert by_id["T2"].status == "failed" and "exited with" in by_id["T2"].reason
    assert by_id["T3"].landed
    assert leftover_worktrees(settings) == []
    assert '"failure_type":"timeout"' in settings.lessons_path.read_text()


async def test_cancel_kills_processes_removes_worktrees_keeps_landed(
        client, make_worker, task_queue, git_remote, settings, tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    marker = uuid.uuid4().hex  # finds the tasks' processes in /proc (`$$` is namespace-local)
    b = board(4, max_parallel=4)
    for t in b.tasks[2:]:
        t.run = (f'echo $$ > "{pids}/$TASKFLEET_TASK_ID"; export CANCEL_TEST={marker}; sleep 60; '
                 + WRITE)
    async with make_worker():
        handle = await start_board(client, b, str(git_remote.clone), task_queue=task_queue,
                                   git_max_batch_age_seconds=0.5)

        async def two_landed_two_running():
            p = await progress(handle)
            assert p.counts["landed"] == 2 and len(list(pids.iterdir())) == 2, p.counts
            return p

        await eventually(two_landed_two_running, timeout=60)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    assert processes_with_environ(f"CANCEL_TEST={marker}") == []
    assert leftover_worktrees(settings) == []
    assert git_remote.remote_ref("task/T1") and git_remote.remote_ref("task/T2")
    assert not git_remote.remote_ref("task/T3")


def test_malformed_boards_are_refused_with_the_key_or_line():
    cases = {
        'run = "x"\nverify = "y"\ncolour = "red"\n[[tasks]]\nid = "A"\n':
            "unknown board key(s) colour",
        'run = "x"\nverify = "y"\n[[tasks]]\nid = "A"\n[[tasks]]\nid = "A"\n':
            "duplicate task id A",
        'run = "x"\nverify = "y"\n[[tasks]]\nid = "A"\nbranch = "-evil"\n': "starts with '-'",
        'run = "x"\nverify = "y"\n[[tasks]]\nid = "A"\nsize = 3\n':
            "board.toml:3: unknown key(s) size",
        '[[tasks]]\nid = "A"\n': "task A has no run command",
        'run = "x"\nverify = "y"\nland = "teleport"\n[[tasks]]\nid = "A"\n':
            "land must be 'push', 'merge' or 'queue'",
    }
    for text, message in cases.items():
        with pytest.raises(BoardError) as caught:
            parse_toml_board(text)
        assert message in str(caught.value), (text, str(caught.value))


async def test_worker_killed_mid_board_completes_and_no_landed_task_runs_twice(
    client, server_address, task_queue, git_remote, tmp_path
):
    runs = tmp_path / "runs.log"
    b = board(8, run=f'echo "$TASKFLEET_TASK_ID" >> "{runs}"; sleep 0.4; ' + WRITE, max_parallel=2)
    state = tmp_path / "worker-state"
    args = ("--address", server_address, "--task-queue", task_queue, "--state-dir", str(state))
    first = WorkerProcess(*args, log=tmp_path / "w1.log")
    await first.wait_started()
    handle = await start_board(client, b, str(git_remote.clone), task_queue=task_queue,
                               heartbeat_timeout_seconds=3, git_max_batch_age_seconds=0.3)

    async def some_landed():
        p = await progress(handle)
        assert p.counts["landed"] >= 2 and p.counts["succeeded"] < 8, p.counts
        return p

    before = await eventually(some_landed, timeout=60)
    first.kill_group()
    landed_before = {t.id for t in before.tasks if t.landed}
    second = WorkerProcess(*args, log=tmp_path / "w2.log")
    try:
        await second.wait_started()
        result = await asyncio.wait_for(handle.result(), 120)
    finally:
        second.kill_group()
    assert all(t.status == "succeeded" and t.landed for t in result.tasks), result.tasks
    executions = runs.read_text().split()
    for task_id in landed_before:
        assert executions.count(task_id) == 1, (task_id, executions)
    for t in result.tasks:
        assert git(git_remote.remote, "rev-list", "--count", f"main..task/{t.id}") == "1"


async def test_history_stays_bounded_with_continue_as_new(client, make_worker,
                                                          task_queue, git_remote):
    tasks = [TaskSpec(id=f"N{i}", run="true", verify="true", worktree=False) for i in range(60)]
    # 60 events: tasks that finish together share workflow tasks, so a run of 60 can stay near
    # 100 events; a limit well under that makes the run continue as new however the timing falls.
    async with make_worker():
        handle = await start_board(client, Board(tasks=tasks, name="noop", max_parallel=10),
                                   str(git_remote.clone), task_queue=task_queue,
                                   max_history_events=60)
        result = await handle.result()
        save_history("orchestrator_continue_as_new", (await handle.fetch_history()).to_json())
    assert [t.status for t in result.tasks] == ["succeeded"] * 60
    assert result.stats.runs > 1
    # each run stops dispatching past the limit, so no run grows far beyond it
    assert result.stats.largest_history_length < 60 + 10 * 8, result.stats


async def test_second_identical_run_hits_the_result_cache_even_after_restart(
    client, make_worker, task_queue, git_remote, settings, tmp_path
):
    counter = tmp_path / "executor-runs"
    run = f'echo x >> "{counter}"; ' + WRITE
    async with make_worker(settings=settings):
        first = await run_board(client, task_queue, git_remote, board(2, run=run))
        second = await run_board(client, task_queue, git_remote, board(2, run=run))
    assert len(counter.read_text().split()) == 2
    assert [t.cache_hit for t in second.tasks] == [True, True]
    assert [t.commit for t in second.tasks] == [t.commit for t in first.tasks]
    assert second.stats.cache_hits == 2 and first.stats.cache_misses == 2
    # a new worker (new process memory) on the same state dir still hits, from SQLite
    async with make_worker(settings=type(settings)(state_dir=settings.state_dir)):
        third = await run_board(client, task_queue, git_remote, board(2, run=run))
        refreshed_board = board(2, run=run)
        for t in refreshed_board.tasks:
            t.refresh = True
        refreshed = await run_board(client, task_queue, git_remote, refreshed_board)
    assert [t.cache_hit for t in third.tasks] == [True, True]
    assert [t.cache_hit for t in refreshed.tasks] == [False, False]
    assert len(counter.read_text().split()) == 4
    assert all(t.landed for t in third.tasks + refreshed.tasks)


async def test_missing_template_variable_fails_the_task_clearly(
        client, make_worker, task_queue, git_remote, settings):
    b = board(2)
    b.tasks[0].template = "Do {{ task.id }} carefully, mind {{ no_such_variable }}"
    async with make_worker():
        result = await run_board(client, task_queue, git_remote, b)
    by_id = {t.id: t for t in result.tasks}
    assert by_id["T1"].status == "failed"
    assert "no_such_variable" in by_id["T1"].reason and "undefined" in by_id["T1"].reason
    assert by_id["T2"].landed
    assert leftover_worktrees(settings) == []
