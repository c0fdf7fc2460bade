"""The embedded dev server (`worker.py --dev`, `taskfleet demo`) starts on a SQLite file that
another process still holds for a moment, as when a killed worker's server is still shutting down as
its replacement starts: it is started again until the file is free,
not reported as a failed start."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from taskfleet.clients.connection import load_connect_config
from taskfleet.devserver.session import DATABASE_BUSY, dev_server_session
from tests.conftest import eventually, free_port

pytestmark = pytest.mark.slow  # starts a server of its own


@pytest.mark.parametrize("old_server_logging", [False, True],
                         ids=["quiet", "old-server-still-logging"])
async def test_a_server_whose_database_is_held_starts_once_it_is_released(
        tmp_path: Path, old_server_logging: bool):
    """With `old_server_logging`, the holder keeps writing into the same log (as a server shutting
    down does), so the refusal is never among the log's last lines."""
    state = tmp_path / "state"
    config = load_connect_config(f"127.0.0.1:{free_port()}", "default")

    async def session() -> bool:
        async with dev_server_session(config, state, ui_port=free_port(),
                                      start_timeout=60) as running:
            await running.client.count_workflows()
            return running.started_here

    assert await session() is True  # the server's database, made by a first run
    holder = sqlite3.connect(state / "temporal.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # what a server still closing the file holds
    log = state / "temporal-server.log"
    chatter = asyncio.create_task(_keep_logging(log)) if old_server_logging else None
    started = asyncio.create_task(session())
    try:

        async def refused_while_held() -> None:
            assert log.exists() and DATABASE_BUSY in log.read_text(errors="replace"), (
                "not refused yet")
            assert not started.done(), started

        await eventually(refused_while_held, timeout=30)
    finally:
        holder.execute("COMMIT")
        holder.close()
        if chatter is not None:
            chatter.cancel()
    assert await asyncio.wait_for(started, 60) is True


async def _keep_logging(log: Path) -> None:
    """Lines a server that is shutting down writes into the log it shares with its replacement."""
    while True:
        with open(log, "a") as out:
            out.write('time=now level=WARN msg="Failed to poll for task." service=worker\n')
        await asyncio.sleep(0.002)  # a steady stream of lines, not synchronization
