"""`taskfleet demo` in a terminal, on a server of its own: it keeps that server up for browsing
until Ctrl-C, and says before then which command brings the server back with a worker."""

from __future__ import annotations

import asyncio
import os
import pty
import signal
from pathlib import Path

import pytest

from taskfleet.cli.demo import DEMO_TASK_QUEUE
from tests.conftest import free_port, python_cmd

pytestmark = pytest.mark.slow  # starts a server of its own


async def test_the_demo_in_a_terminal_says_how_to_bring_its_server_back(tmp_path: Path):
    address = f"127.0.0.1:{free_port()}"
    primary, terminal = pty.openpty()
    proc = await asyncio.create_subprocess_exec(
        *python_cmd("-m", "taskfleet.cli", "--address", address, "demo", "--state-dir",
                    str(tmp_path / "state")),
        cwd=tmp_path, stdin=terminal, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    os.close(terminal)
    lines: list[str] = []
    try:
        while not lines or "Ctrl-C to stop" not in lines[-1]:
            line = (await asyncio.wait_for(proc.stdout.readline(), 240)).decode()
            assert line, "".join(lines)
            lines.append(line)
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.wait(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        os.close(primary)
    text = "".join(lines)
    assert "pushes:   1 for 9 landed tasks" in text
    told = next(line for line in lines if line.startswith("After Ctrl-C, "))
    assert f"--dev --address {address} --state-dir " in told
    assert f"--task-queue {DEMO_TASK_QUEUE}` brings the server back" in told
    assert proc.returncode == 0
