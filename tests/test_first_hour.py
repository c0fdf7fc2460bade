"""What a new user meets in the first hour, run as they would run it.

Every command is the installed `taskfleet` console script in a subprocess whose working directory is
a temporary folder outside the project.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import signal
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from taskfleet.clients.git_batcher import git_batch_workflow_id
from taskfleet.clients.orchestrator import start_board
from taskfleet.clients.pollers import workflow_pollers
from taskfleet.core.boards import load_board
from tests.conftest import GitRemoteFixture, eventually
from tests.user_cli import TASKFLEET, LiveProcess, assert_one_line_refusal, taskfleet


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    return folder


def write_board(folder: Path, rows: list[tuple[str, str]], name: str = "board.md") -> Path:
    """A markdown board; each row is (task id, Verification cell)."""
    lines = ["| ID | Scope | Status | Branch | Verification |", "|----|----|----|----|----|"]
    lines += [f"| {tid} | do {tid} | [ ] | `task/{tid}` | {cell} |" for tid, cell in rows]
    board = folder / name
    board.write_text("\n".join(lines) + "\n")
    return board


async def assert_no_workflow(client: Client, workflow_id: str) -> None:
    with pytest.raises(RPCError) as caught:
        await client.get_workflow_handle(workflow_id).describe()
    assert caught.value.status == RPCStatusCode.NOT_FOUND


async def test_run_checks_repo_base_and_remote_before_starting(
    server_address, task_queue, client, git_remote: GitRemoteFixture, user_dir
):
    board = write_board(user_dir, [("A1", "`true`")])
    not_a_clone = user_dir / "not-a-clone"
    not_a_clone.mkdir()
    cases = [
        (["--repo", str(not_a_clone)], "not a git repository"),
        (["--repo", str(user_dir / "missing")], "no such folder"),
        (["--repo", str(git_remote.clone), "--remote", "upstream"], "has no remote 'upstream'"),
        (["--repo", str(git_remote.clone), "--base", "develop"], "base branch 'develop'"),
    ]
    for i, (flags, expected) in enumerate(cases):
        run_id = f"precheck-{task_queue}-{i}"
        done = await taskfleet(server_address, "run", str(board), "--run", "true", "--id", run_id,
                               *flags, cwd=user_dir, task_queue=task_queue)
        assert_one_line_refusal(done, expected)
        await assert_no_workflow(client, run_id)
        repo = flags[1]
        remote = flags[3] if flags[2:3] == ["--remote"] else "origin"
        await assert_no_workflow(client, git_batch_workflow_id(repo, remote, task_queue=task_queue))


async def test_run_just_after_the_worker_stopped_still_says_no_worker_takes_it(
    server_address, task_queue, client, make_worker, git_remote: GitRemoteFixture, user_dir
):
    async with make_worker():
        async def listed() -> None:
            assert await workflow_pollers(client, task_queue)
        await eventually(listed)
    # The worker is gone, but the server goes on listing it as a poller for minutes.
    assert await workflow_pollers(client, task_queue)
    board = write_board(user_dir, [("S1", "`true`")])
    live = await LiveProcess.start(server_address, "run", str(board), "--repo",
                                   str(git_remote.clone), "--run", "true", "--id",
                                   f"stale-{task_queue}", cwd=user_dir, task_queue=task_queue)
    try:
        await live.wait_for_stderr(f"no worker polls task queue '{task_queue}'")
        await live.wait_for_stderr(
            f"`taskfleet-worker --address {server_address} --task-queue {task_queue}`")
        live.proc.send_signal(signal.SIGINT)
        code, _, err = await live.finish()
    finally:
        if live.proc.returncode is None:
            live.proc.kill()
    assert code == 130 and "Traceback" not in err


async def test_run_without_worker_says_so_then_ctrl_c_says_how_to_follow(
    server_address, task_queue, client, git_remote: GitRemoteFixture, user_dir
):
    board = write_board(user_dir, [("W1", "`true`")])
    run_id = f"nobody-{task_queue}"
    live = await LiveProcess.start(server_address, "run", str(board), "--repo",
                                   str(git_remote.clone), "--run", "true", "--id", run_id,
                                   cwd=user_dir, task_queue=task_queue)
    try:
        await live.wait_for_stderr(f"no worker polls task queue '{task_queue}'")
        assert live.proc.returncode is None  # it keeps waiting
        # A second run with the same id while this one is running: refused, one line.
        again = await taskfleet(server_address, "run", str(board), "--repo", str(git_remote.clone),
                                "--run", "true", "--id", run_id, cwd=user_dir,
                                task_queue=task_queue)
        assert_one_line_refusal(again, run_id, "still running")
        live.proc.send_signal(signal.SIGINT)
        code, _, err = await live.finish()
    finally:
        if live.proc.returncode is None:
            live.proc.kill()
    assert code == 130, err
    assert "Traceback" not in err
    # The hint printed at the start can be copied as it is: it carries the connection flags.
    assert f"`taskfleet --address {server_address} status {run_id}` to check on it" in err
    last = err.strip().splitlines()[-1]
    assert "the run goes on" in last and f"status {run_id}" in last and f"cancel {run_id}" in last
    description = await client.get_workflow_handle(run_id).describe()
    assert description.status == WorkflowExecutionStatus.RUNNING
    await client.get_workflow_handle(run_id).terminate(reason="test over")


async def test_failure_reasons_in_full_in_json_and_status_and_the_table_points_below(
    server_address, task_queue, make_worker, git_remote: GitRemoteFixture, user_dir
):
    long_message = "the verification failed because " + "of a long and detailed reason " * 6 + "END"
    board = write_board(user_dir, [("F1", f"`echo '{long_message}' >&2; exit 3`")])
    run_id = f"reasons-{task_queue}"
    async with make_worker():
        ran = await taskfleet(server_address, "run", str(board), "--repo", str(git_remote.clone),
                              "--run", "true", "--id", run_id, "--json", cwd=user_dir,
                              task_queue=task_queue)
        assert ran.returncode == 1, ran.stderr
        reason = json.loads(ran.stdout)["tasks"][0]["reason"]
        assert len(reason) > 60
        table = await taskfleet(server_address, "status", run_id, cwd=user_dir,
                                task_queue=task_queue)
    assert table.returncode == 1, table.stderr  # as `run`: a task failed
    assert "(below)" in table.stdout and "F1: (log: " in table.stdout
    assert " ".join(reason.split()) in " ".join(table.stdout.split())
    # After the worker is gone, status still answers (from the closed run's result), reasons in
    # full.
    shown = await taskfleet(server_address, "status", run_id, "--json", cwd=user_dir,
                            task_queue=task_queue, timeout=20)
    assert shown.returncode == 1, shown.stderr
    status = json.loads(shown.stdout)
    assert status["status"] == "COMPLETED" and status["tasks"][0]["reason"] == reason
    assert status["counts"]["failed"] == 1 and "WARN" not in shown.stderr


async def test_status_json_of_a_running_run_has_the_failed_tasks_reason(
    server_address, task_queue, client, make_worker, git_remote: GitRemoteFixture, user_dir
):
    board = load_board(write_board(
        user_dir, [("R1", "`echo broken >&2; exit 4`"), ("R2", "`sleep 600`")]), run="true")
    run_id = f"running-reasons-{task_queue}"
    async with make_worker():
        handle = await start_board(client, board, str(git_remote.clone), task_queue=task_queue,
                                   workflow_id=run_id)

        async def failed_with_reason() -> None:
            shown = await taskfleet(server_address, "status", run_id, "--json", cwd=user_dir,
                                    task_queue=task_queue)
            status = json.loads(shown.stdout)
            assert status["status"] == "RUNNING"
            r1 = next((t for t in status["tasks"] if t["id"] == "R1"), None)
            assert r1 is not None, status["tasks"]
            assert r1["status"] == "failed" and "exited with 4" in r1["reason"], r1
            assert shown.returncode == 1, shown.stderr  # running, and a task failed already

        await eventually(failed_with_reason, timeout=60)
        await handle.cancel()


async def test_status_of_a_finished_run_answers_without_a_worker(
    server_address, task_queue, make_worker, git_remote: GitRemoteFixture, user_dir
):
    board = write_board(user_dir, [("S1", "`true`"), ("S2", "`true`")])
    run_id = f"finished-{task_queue}"
    async with make_worker():
        ran = await taskfleet(server_address, "run", str(board), "--repo", str(git_remote.clone),
                              "--run", "true", "--id", run_id, cwd=user_dir, task_queue=task_queue)
        assert ran.returncode == 0, ran.stderr
    shown = await taskfleet(server_address, "status", run_id, cwd=user_dir,
                            task_queue=task_queue, timeout=20)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"{run_id}: COMPLETED") and "2/2 done" in shown.stdout
    assert "2 landed" in shown.stdout and shown.stderr == ""
    unknown = await taskfleet(server_address, "status", f"nothing-{task_queue}",
                              cwd=user_dir, timeout=20)
    assert unknown.returncode == 2 and unknown.stderr.strip() == (
        f"taskfleet: no run nothing-{task_queue} in namespace default")


async def test_verify_flag_and_a_code_span_cell_the_cell_wins_and_says_so(
    server_address, task_queue, make_worker, git_remote: GitRemoteFixture, user_dir
):
    board = write_board(user_dir, [("V1", "`false`"), ("V2", "prose acceptance text")])
    async with make_worker():
        ran = await taskfleet(server_address, "run", str(board), "--repo", str(git_remote.clone),
                              "--run", "true", "--verify", "true", "--json", cwd=user_dir,
                              task_queue=task_queue)
    assert ("--verify applies to the other tasks; V1 keeps the command in its Verification cell"
            in ran.stderr)
    statuses = {t["id"]: t["status"] for t in json.loads(ran.stdout)["tasks"]}
    assert statuses == {"V1": "failed", "V2": "succeeded"}
    assert ran.returncode == 1


async def test_progress_line_is_redrawn_at_the_end(
    server_address, task_queue, make_worker, git_remote: GitRemoteFixture, user_dir
):
    """In a terminal the last progress line agrees with the table (not "0 landed, 0 push(es)")."""
    board = write_board(user_dir, [("P1", "`true`"), ("P2", "`true`"), ("P3", "`true`")])
    primary, secondary = pty.openpty()

    def drain() -> bytes:  # read the terminal while the run draws on it, so its writes never block
        seen = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the last writer closed the terminal
                return seen
            if not chunk:
                return seen
            seen += chunk

    reader = asyncio.ensure_future(asyncio.to_thread(drain))
    async with make_worker():
        proc = await asyncio.create_subprocess_exec(
            TASKFLEET, "--address", server_address, "--task-queue", task_queue, "run", str(board),
            "--repo", str(git_remote.clone), "--run", "true", cwd=user_dir,
            stdout=asyncio.subprocess.PIPE, stderr=secondary, stdin=asyncio.subprocess.DEVNULL,
        )
        os.close(secondary)
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
    terminal = await asyncio.wait_for(reader, 30)
    os.close(primary)
    assert proc.returncode == 0, terminal.decode(errors="replace")
    last_drawn = terminal.decode().replace("\r\n", "\n").split("\n")
    progress = [part for line in last_drawn for part in line.split("\r") if "done," in part]
    assert progress, terminal
    assert "3/3 done, 0 failed, 0 running, 3 landed, 1 push(es)" in progress[-1]
    assert "P3" in out.decode()


async def test_empty_lessons_query_says_no_lessons_match(server_address, task_queue,
                                                         make_worker, user_dir):
    async with make_worker():
        done = await taskfleet(server_address, "lessons", "query", "--task-type",
                               "nothing-like-this", cwd=user_dir, task_queue=task_queue)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("no lessons match")


async def test_run_json_into_a_closed_pipe_exits_quietly(
    server_address, task_queue, make_worker, git_remote: GitRemoteFixture, user_dir
):
    board = write_board(user_dir, [("J1", "`true`")])
    command = (f"{TASKFLEET} --address {server_address} --task-queue {task_queue} run {board} "
               f"--repo {git_remote.clone} --run true --json")
    async with make_worker():
        # `true` never reads: the write always meets a closed pipe
        for reader in ("head -1", "true"):
            proc = await asyncio.create_subprocess_exec(
                "bash", "-c", f"{command} | {reader}; exit ${{PIPESTATUS[0]}}", cwd=user_dir,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(proc.communicate(), 120)
            assert proc.returncode == 0, err.decode()
            assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
            assert out.decode().strip() in ("{", "")


async def test_flush_wait_prints_a_failed_batch_readably(server_address, task_queue,
                                                         make_worker, user_dir):
    not_a_clone = user_dir / "plain-folder"
    not_a_clone.mkdir()
    repo = ["--repo", str(not_a_clone)]
    async with make_worker():
        sent = await taskfleet(server_address, "git", "enqueue", *repo, "--branch", "main", "--id",
                               "op-1", cwd=user_dir, task_queue=task_queue)
        assert sent.returncode == 0, sent.stderr
        flushed = await taskfleet(server_address, "git", "flush", *repo, "--wait", cwd=user_dir,
                                  task_queue=task_queue)
    assert flushed.returncode == 1, flushed.stderr
    text = flushed.stdout
    assert "failed" in text and "error:" in text and str(not_a_clone) in text
    for noise in ("map[", "Traceback", "\\n"):
        assert noise not in text, text
    assert text.count("InvalidRepository") == 1, text
