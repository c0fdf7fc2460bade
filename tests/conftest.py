"""Test harness: one real Temporal dev server per session, a fresh task queue per test, real git."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any, TypeVar

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from taskfleet.core.search_attributes import ALL as SEARCH_ATTRIBUTES
from taskfleet.core.settings import TaskfleetSettings
from taskfleet.devserver.server import find_temporal_cli
from taskfleet.plugin import TaskfleetPlugin
from taskfleet.testing import GitRemoteFixture, git, make_git_remote

__all__ = ["GitRemoteFixture", "git", "make_git_remote"]

ROOT = Path(__file__).resolve().parent.parent
HISTORIES = Path(__file__).resolve().parent / "histories"
T = TypeVar("T")

# Commits made by tests need an author; CI machines have no global git identity.
for _key, _value in {
    "GIT_AUTHOR_NAME": "taskfleet tests",
    "GIT_AUTHOR_EMAIL": "tests@taskfleet.invalid",
    "GIT_COMMITTER_NAME": "taskfleet tests",
    "GIT_COMMITTER_EMAIL": "tests@taskfleet.invalid",
}.items():
    os.environ.setdefault(_key, _value)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that needs the dev server, so `make test-fast` can leave those out but its
    `smoke` paths (`-m "not server and not slow or smoke"`); and put the files marked `heavy` first.

    `make test` hands files to its processes in collection order (`--dist loadfile
    --no-loadscope-reorder`): a long file started last would run on alone after the others are done,
    so the long ones start first and the many short ones fill in around them. `heavy(seconds=N)` is
    the file's wall time on its own; `waits=True` says it spends most of it waiting (killed workers,
    heartbeats and leases running out). The heavy files go out longest first, each busy one beside
    two that wait, so the waits of the three processes seldom leave both cores idle at once.
    """
    for item in items:
        if "env" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.server)
    order = {path: rank for rank, path in enumerate(_heavy_files_in_turn(items))}
    # stable: file and test order kept
    items.sort(key=lambda item: order.get(item.path, len(order)))


def _heavy_files_in_turn(items: list[pytest.Item]) -> list[Path]:
    """The heavy files, longest first, taken one busy file and then two waiting ones in turn."""
    busy: dict[Path, float] = {}
    waiting: dict[Path, float] = {}
    for item in items:
        mark = item.get_closest_marker("heavy")
        if mark is not None:
            (waiting if mark.kwargs.get("waits") else busy)[item.path] = float(
                mark.kwargs.get("seconds", 1))
    busy_first = sorted(busy, key=busy.__getitem__, reverse=True)
    waiting_first = sorted(waiting, key=waiting.__getitem__, reverse=True)
    turns: list[Path] = []
    while busy_first or waiting_first:
        turns += busy_first[:1] + waiting_first[:2]
        busy_first, waiting_first = busy_first[1:], waiting_first[2:]
    return turns


@pytest.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await WorkflowEnvironment.start_local(
        dev_server_existing_path=find_temporal_cli(),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_log_level="error",
    )
    try:
        yield environment
    finally:
        await environment.shutdown()


@pytest.fixture
def client(env: WorkflowEnvironment) -> Client:
    return env.client


@pytest.fixture
def server_address(env: WorkflowEnvironment) -> str:
    return env.client.service_client.config.target_host


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def settings(tmp_path: Path) -> TaskfleetSettings:
    return TaskfleetSettings(state_dir=tmp_path / "state")


@pytest.fixture
def make_worker(client: Client, task_queue: str, settings: TaskfleetSettings):
    """`async with make_worker() as worker:` runs a worker with the plugin on this test's queue."""

    @asynccontextmanager
    async def start(**kwargs: Any) -> AsyncIterator[Worker]:
        worker = Worker(
            client,
            task_queue=task_queue,
            plugins=[TaskfleetPlugin(kwargs.pop("settings", settings))],
            **kwargs,
        )
        async with worker:
            yield worker

    return start


async def eventually(
    check: Callable[[], Awaitable[T]], timeout: float = 30.0, interval: float = 0.1
) -> T:
    """Poll `check` until it returns without raising AssertionError;
    re-raise the last one at timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(interval)


async def landed_ops(gb, count: int, timeout: float = 30.0):
    """The batcher's status once `count` ops have landed or failed."""

    async def check():
        status = await gb.status()
        assert status.stats.landed_ops + status.stats.failed_ops >= count, status.stats
        return status

    return await eventually(check, timeout=timeout)


# --- git ---------------------------------------------------------------------------------------


@pytest.fixture
def git_remote(tmp_path: Path) -> GitRemoteFixture:
    return make_git_remote(tmp_path / "git")


# --- subprocesses -------------------------------------------------------------------------------


def hold_pushes(fx: GitRemoteFixture, tmp_path: Path) -> tuple[Path, Path]:
    """The remote holds every push open until the test creates `release`; `started` appears once a
    push has reached it. Pushes still count in `fx.pushes()`."""
    started, release = tmp_path / "push-started", tmp_path / "push-release"
    fx.install_hook(
        "pre-receive",
        f'cat > /dev/null\ntouch "{started}"\n'
        f'while [ ! -e "{release}" ]; do sleep 0.05; done\necho push >> "{fx.push_log}"\n',
    )
    return started, release


def processes_with_environ(entry: str) -> list[int]:
    """Live (not zombie) processes of this machine whose environment holds `entry` (`NAME=value`).

    How tests find a task's processes: inside a task's PID namespace `$$` is not the process's pid
    on this machine, so a task exports a marker instead and the test looks for it in /proc."""
    needle = b"\0" + entry.encode() + b"\0"
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                environ = b"\0" + handle.read() + b"\0"
            if needle in environ and (
                    Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"):
                found.append(int(name))
        except (OSError, IndexError):
            continue
    return found


def python_cmd(*args: str) -> list[str]:
    return [sys.executable, *args]


def save_history(name: str, history_json: str) -> None:
    """Record a history for the replay test (only when asked: `make histories`).

    Recordings are kept, never overwritten: a new one is added beside the old as
    `<name>--<taskfleet version>.json`, so histories of every released shape keep replaying.
    """
    if os.environ.get("TASKFLEET_RECORD_HISTORIES"):
        from importlib.metadata import version

        HISTORIES.mkdir(exist_ok=True)
        for candidate in (HISTORIES / f"{name}.json",
                          HISTORIES / f"{name}--{version('taskfleet')}.json"):
            if not candidate.exists():
                candidate.write_text(history_json)
                return


def free_port() -> int:
    """A TCP port nothing listens on now, for a server a test starts itself."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kill_process_group(proc: subprocess.Popen, out: IO) -> None:
    """SIGKILL a process's whole group (no clean-up runs, as when a node dies), reap it,
    close its log."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    out.close()


class WorkerProcess:
    """`python worker.py` in its own process group, so a test can SIGKILL it with its children."""

    def __init__(self, *args: str, log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self.out = open(log, "ab")
        self.proc = subprocess.Popen(
            python_cmd(str(ROOT / "worker.py"), *args),
            cwd=ROOT,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    async def wait_started(self, timeout: float = 60.0) -> None:
        async def check() -> None:
            assert self.proc.poll() is None, f"worker exited early:\n{self.output()}"
            assert "task_queue=" in self.output(), "worker has not printed its start-up line yet"

        await eventually(check, timeout=timeout)

    def kill_group(self) -> None:
        kill_process_group(self.proc, self.out)

    def interrupt(self, timeout: float = 60.0) -> int:
        import signal

        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.out.close()
