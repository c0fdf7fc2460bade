"""`python worker.py`: --dev starts or reuses the embedded server, stops cleanly,
and bad config is one line."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest
from temporalio.client import Client

from taskfleet.clients.connection import port_is_open
from taskfleet.core.models.lessons import LessonsAnswer
from taskfleet.core.names import LESSONS_QUERY_WORKFLOW
from tests.conftest import ROOT, WorkerProcess, eventually, free_port, python_cmd

pytestmark = [pytest.mark.slow, pytest.mark.heavy(seconds=10)]  # starts worker processes of its own


def processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


async def test_dev_worker_starts_server_second_reuses_it_and_ctrl_c_leaves_nothing(tmp_path: Path):
    port, ui_port = free_port(), free_port()
    state = tmp_path / "state"
    args = ("--dev", "--address", f"127.0.0.1:{port}", "--ui-port", str(ui_port),
            "--state-dir", str(state))
    first = WorkerProcess(*args, "--task-queue", "first", log=tmp_path / "first.log")
    await first.wait_started()
    assert "started the embedded dev server" in first.output()
    assert f"ui=http://localhost:{ui_port}" in first.output()
    assert (state / "temporal.db").exists(), (
        "the dev server should persist to SQLite in the state dir")

    second = WorkerProcess(*args, "--task-queue", "second", log=tmp_path / "second.log")
    await second.wait_started()
    assert "reusing the server" in second.output()
    assert len(processes_mentioning(str(state / "temporal.db"))) == 1, "a second server was started"

    # The worker really serves: ask the second worker's lessons index through its queue.
    client = await Client.connect(f"127.0.0.1:{port}")
    answer = await client.execute_workflow(LESSONS_QUERY_WORKFLOW, None, id="dev-lessons",
                                           task_queue="second", result_type=LessonsAnswer)
    assert answer.stats.path == str(state / "lessons.jsonl")

    assert second.interrupt() == 0
    assert "stopped" in second.output()
    assert port_is_open("127.0.0.1", port), (
        "the second worker must not stop a server it did not start")
    assert first.interrupt() == 0
    assert processes_mentioning(str(state / "temporal.db")) == []
    assert not port_is_open("127.0.0.1", port)


async def test_dev_server_survives_no_orphan_when_worker_is_killed(tmp_path: Path):
    port = free_port()
    state = tmp_path / "state"
    worker = WorkerProcess("--dev", "--address", f"127.0.0.1:{port}", "--ui-port", str(free_port()),
                           "--state-dir", str(state), log=tmp_path / "w.log")
    await worker.wait_started()
    os.kill(worker.proc.pid, 9)  # only the worker; the server must notice its parent died
    worker.proc.wait()

    async def server_gone() -> None:
        assert processes_mentioning(str(state / "temporal.db")) == []

    await eventually(server_gone, timeout=30)
    worker.out.close()


def run_worker_expecting_failure(*args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        python_cmd(str(ROOT / "worker.py"), *args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_unreachable_address_is_one_line():
    line = run_worker_expecting_failure("--address", f"127.0.0.1:{free_port()}")
    assert "cannot connect to Temporal at 127.0.0.1" in line


def test_bad_tls_file_is_one_line(tmp_path: Path):
    missing = tmp_path / "missing-cert.pem"
    line = run_worker_expecting_failure("--address", "127.0.0.1:7233",
                                        env={"TEMPORAL_TLS_CLIENT_CERT_PATH": str(missing),
                                             "TEMPORAL_TLS_CLIENT_KEY_PATH": str(missing)})
    assert "bad Temporal client configuration" in line and "missing-cert.pem" in line


def test_port_taken_by_something_else_is_one_line(tmp_path: Path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    stop = threading.Event()

    def answer_garbage() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.sendall(b"HTTP/1.0 400 not temporal\r\n\r\n")
            conn.close()

    thread = threading.Thread(target=answer_garbage, daemon=True)
    thread.start()
    try:
        line = run_worker_expecting_failure("--dev", "--address", f"127.0.0.1:{port}",
                                            "--state-dir", str(tmp_path))
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert f"port {port}" in line and "not a Temporal server" in line


@pytest.mark.parametrize("value", ["0", "many"])
def test_bad_activity_slots_is_one_line(value: str):
    line = run_worker_expecting_failure(env={"TASKFLEET_MAX_CONCURRENT_ACTIVITIES": value})
    assert "TASKFLEET_MAX_CONCURRENT_ACTIVITIES" in line or "at least 1" in line


async def test_sigterm_during_a_start_that_then_fails_exits(tmp_path: Path, server_address: str,
                                                            task_queue: str):
    """SIGTERM while the plugin's services start, then the start fails: the worker
    exits (the SDK only marks a shutdown complete once polling began, so waiting for it hung).

    The lessons file is a FIFO, so the start waits in the lessons load until the test writes to it;
    the result cache path is a folder, so the start fails right after."""
    import signal

    state = tmp_path / "state"
    state.mkdir()
    os.mkfifo(state / "lessons.jsonl")
    (state / "result-cache.sqlite").mkdir()
    worker = WorkerProcess("--address", server_address, "--task-queue", task_queue, "--state-dir",
                           str(state), log=tmp_path / "w.log")
    try:
        await worker.wait_started()
        worker.proc.send_signal(signal.SIGTERM)

        async def shutting_down() -> None:
            assert "shutting down" in worker.output()

        await eventually(shutting_down)
        # the load reads an empty file, then the start fails
        with open(state / "lessons.jsonl", "w") as fifo:
            fifo.write("")
        assert worker.proc.wait(timeout=30) == 0
        assert "error while stopping" in worker.output()
    finally:
        worker.kill_group()
