"""Use the Temporal server at an address, starting the embedded dev server there if none answers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.runtime import Runtime

from taskfleet.clients.connection import StartupError, connect, port_is_open, split_host_port
from taskfleet.devserver.server import DevServer, DevServerError


@dataclass
class ServerSession:
    client: Client
    ui_url: str
    started_here: bool


# What the server logs when another server still has its SQLite file open.
DATABASE_BUSY = "database is locked"


async def _wait_until_answering(
    server: DevServer, config: dict[str, Any], runtime: Runtime | None, timeout: float
) -> Client:
    """The client once the server we started answers; a server that exited because its database is
    still held (a killed worker's server still closing it) is started again until `timeout`."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while time.monotonic() < deadline:
        died = server.exited_early()
        if died is not None and DATABASE_BUSY in died and time.monotonic() + 1.0 < deadline:
            await asyncio.sleep(0.5)  # the other server is shutting down; not test synchronization
            server.start()
            continue
        if died is not None:
            raise StartupError(f"the dev server exited at start: {died}")
        try:
            return await connect(config, runtime, timeout=2.0)
        except StartupError as err:
            last_error = str(err)
        await asyncio.sleep(0.2)  # polling a process we started; not test synchronization
    raise StartupError(f"the dev server did not answer within {timeout:.0f}s ({last_error})")


@asynccontextmanager
async def dev_server_session(
    config: dict[str, Any],
    state_dir: Path,
    ui_port: int | None = None,
    runtime: Runtime | None = None,
    start_timeout: float = 60.0,
) -> AsyncIterator[ServerSession]:
    """Reuse the server answering at the configured address, or start one there (stopped after)."""
    host, port = split_host_port(config["target_host"])
    ui_port = ui_port or port + 1000
    ui_host = "localhost" if host in ("127.0.0.1", "localhost") else host
    ui_url = f"http://{ui_host}:{ui_port}"
    if port_is_open(host, port):
        try:
            client = await connect(config, runtime, timeout=5.0)
        except StartupError:
            raise StartupError(
                f"port {port} on {host} is in use by something that is not a Temporal server; "
                "stop it or choose another address with --address"
            ) from None
        yield ServerSession(client=client, ui_url=ui_url, started_here=False)
        return

    server = DevServer(
        host=host,
        port=port,
        ui_port=ui_port,
        db_file=state_dir / "temporal.db",
        log_file=state_dir / "temporal-server.log",
    )
    try:
        server.start()
    except (DevServerError, OSError) as err:
        raise StartupError(f"cannot start the dev server: {err}") from None
    try:
        client = await _wait_until_answering(server, config, runtime, start_timeout)
        yield ServerSession(client=client, ui_url=ui_url, started_here=True)
    finally:
        server.stop()
