"""The `taskfleet` console script run as a user runs it: a subprocess,
from a folder outside the project."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(sys.executable).parent
TASKFLEET = str(SCRIPTS / "taskfleet")


async def taskfleet(
    address: str, *args: str, cwd: Path, task_queue: str | None = None, timeout: float = 120,
    namespace: str | None = None, env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """`taskfleet --address A [--task-queue Q] args...` run to completion without blocking the loop
    (`env`: the whole environment it gets, else this process's)."""
    cmd = [TASKFLEET, "--address", address]
    cmd += ["--task-queue", task_queue] if task_queue else []
    cmd += ["--namespace", namespace] if namespace else []
    cmd += list(args)
    proc = await asyncio.create_subprocess_exec(
        *cmd, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL, env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return subprocess.CompletedProcess(cmd, proc.returncode, out.decode(), err.decode())


def assert_one_line_refusal(done: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit code 2, nothing on stdout, exactly one line on stderr naming each fragment;
    no traceback."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


class LiveProcess:
    """A CLI process whose stderr is read while it runs (to wait for a line, then signal it)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.err = ""

    @classmethod
    async def start(cls, address: str, *args: str, cwd: Path, task_queue: str) -> "LiveProcess":
        proc = await asyncio.create_subprocess_exec(
            TASKFLEET, "--address", address, "--task-queue", task_queue, *args, cwd=cwd,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        return cls(proc)

    async def wait_for_stderr(self, text: str, timeout: float = 30) -> str:
        async def read() -> str:
            while text not in self.err:
                chunk = await self.proc.stderr.read(4096)
                if not chunk:
                    raise AssertionError(f"process ended before printing {text!r}:\n{self.err}")
                self.err += chunk.decode()
            return self.err

        return await asyncio.wait_for(read(), timeout)

    async def finish(self, timeout: float = 30) -> tuple[int, str, str]:
        out, err = await asyncio.wait_for(self.proc.communicate(), timeout)
        self.err += err.decode()
        return self.proc.returncode, out.decode(), self.err
