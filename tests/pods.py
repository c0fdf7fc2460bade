"""Pods for tests: worker processes that share what pods share and keep to themselves what pods
keep.

Each pod is `python worker.py` in its own mount namespace (`unshare -m --propagation private`) with
a private tmpfs mounted at the state-dir path, the same path for every pod, as when N pods mount an
`emptyDir` at the same place. The clone, its bare remote and the lessons folder stay on the normal
file system, which all pods see. Needs root and Linux mount namespaces (CI has both); tests that use
pods skip, saying why, where they are missing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from tests.conftest import ROOT, eventually, kill_process_group

# sh runs inside the new namespace: mount the private tmpfs, then become the worker.
_MOUNT_AND_EXEC = ('mount -t tmpfs -o size=256m "taskfleet-$TASKFLEET_POD_ID" "$1"'
                   ' && shift && exec "$@"')


@lru_cache(maxsize=1)
def namespaces_unavailable() -> str:
    """Why pods cannot be simulated here ("" when they can)."""
    if sys.platform != "linux":
        return f"pods need Linux mount namespaces (this is {sys.platform})"
    if not shutil.which("unshare"):
        return "pods need util-linux `unshare` on PATH"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs probe /mnt 2>&1 || mount -t tmpfs probe /tmp 2>&1"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        reason = (probe.stderr or probe.stdout).strip().splitlines()
        return ("cannot make a private mount namespace with a tmpfs (root needed): "
                f"{reason[-1] if reason else probe.returncode}")
    return ""


requires_pods = pytest.mark.skipif(bool(namespaces_unavailable()),
                                   reason=namespaces_unavailable() or "n/a")


class Pod:
    """One simulated pod: a worker in a private mount namespace with its own tmpfs
    at `state_dir`."""

    def __init__(
        self,
        name: str,
        *,
        state_dir: Path,
        address: str,
        task_queue: str,
        log: Path,
        env: dict[str, str] | None = None,
        worker_args: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.state_dir = state_dir
        self.log = log
        state_dir.mkdir(parents=True, exist_ok=True)  # the mount point; stays empty on the host
        self.env = {**os.environ, **(env or {}), "TASKFLEET_POD_ID": name,
                    "TASKFLEET_STATE_DIR": str(state_dir)}
        self.cmd = [
            "unshare", "-m", "--propagation", "private",
            "sh", "-c", _MOUNT_AND_EXEC, "pod", str(state_dir),
            sys.executable, str(ROOT / "worker.py"),
            "--address", address, "--task-queue", task_queue, "--state-dir", str(state_dir),
            *worker_args,
        ]
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        """(Re)start: a restarted pod gets a fresh tmpfs,
        as a rescheduled pod gets a fresh emptyDir."""
        self.out = open(self.log, "ab")
        self._starts_before = self.output().count("task_queue=")
        self.proc = subprocess.Popen(
            self.cmd, cwd=ROOT, stdout=self.out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=self.env,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    async def wait_started(self, timeout: float = 60.0) -> None:
        async def check() -> None:
            assert self.proc.poll() is None, (
                f"pod {self.name} exited early:\n{self.output()[-3000:]}")
            assert self.output().count("task_queue=") > self._starts_before, "no start-up line yet"

        await eventually(check, timeout=timeout)

    def run_inside(self, *cmd: str) -> subprocess.CompletedProcess:
        """Run `cmd` in this pod's mount namespace (sees its tmpfs),
        e.g. to look at its state dir."""
        assert self.proc is not None and self.proc.poll() is None, f"pod {self.name} is not running"
        return subprocess.run(["nsenter", "-t", str(self.proc.pid), "-m", *cmd],
                              capture_output=True, text=True)

    def kill(self) -> None:
        """SIGKILL the pod's whole process group: no clean-up runs, as when a node dies."""
        if self.proc is not None:
            kill_process_group(self.proc, self.out)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait: the worker's graceful shutdown."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        if not self.out.closed:
            self.out.close()
        return self.proc.returncode
