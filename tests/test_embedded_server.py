"""The embedded dev server (`worker.py --dev`, `taskfleet demo`) starts on a SQLite file that another
process still holds for a moment, as when a killed worker's server is still shutting down as its
replacement starts: it is started again until the file is free, not reported as a failed start."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from taskfleet.clients.connection import load_connect_config
from taskfleet.devserver.session import DATABASE_BUSY, dev_server_session
from tests.conftest import eventually, free_port

pytestmark = pytest.mark.slow  # starts a server of its own


async def test_a_server_whose_database_is_held_starts_once_it_is_released(tmp_path: Path):
    state = tmp_path / "state"
    config = load_connect_config(f"127.0.0.1:{free_port()}", "default")

    async def session() -> bool:
        async with dev_server_session(config, state, ui_port=free_port(), start_timeout=60) as running:
            await running.client.count_workflows()
            return running.started_here

    assert await session() is True  # the server's database, made by a first run
    holder = sqlite3.connect(state / "temporal.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # what a server still closing the file holds
    started = asyncio.create_task(session())
    try:
        log = state / "temporal-server.log"

        async def refused_while_held() -> None:
            assert log.exists() and DATABASE_BUSY in log.read_text(errors="replace"), "not refused yet"
            assert not started.done(), started

        await eventually(refused_while_held, timeout=30)
    finally:
        holder.execute("COMMIT")
        holder.close()
    assert await asyncio.wait_for(started, 60) is True
