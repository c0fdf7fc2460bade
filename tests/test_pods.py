"""The pod harness itself: private state dirs at one path, a shared file system,
restart = fresh state."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import eventually
from tests.pods import Pod, requires_pods


@requires_pods
async def test_pods_keep_their_state_dirs_to_themselves(server_address: str, task_queue: str,
                                                        tmp_path: Path):
    state = tmp_path / "state"  # one path, a different tmpfs in each pod
    shared = tmp_path / "shared"
    shared.mkdir()
    pods = [Pod(name, state_dir=state, address=server_address, task_queue=task_queue,
                log=tmp_path / f"{name}.log") for name in ("pod-a", "pod-b")]
    try:
        for pod in pods:
            await pod.wait_started()
        a, b = pods
        assert (os.readlink(f"/proc/{a.proc.pid}/ns/mnt")
                != os.readlink(f"/proc/{b.proc.pid}/ns/mnt"))
        for pod in pods:

            async def services_started(pod=pod) -> None:  # the worker writes its state dir
                listing = pod.run_inside("ls", str(state))
                assert listing.returncode == 0 and "logs" in listing.stdout.split(), listing

            await eventually(services_started)
            assert pod.run_inside("sh", "-c", f"echo {pod.name} > {state}/mine && echo {pod.name} "
                                              f"> {shared}/{pod.name}").returncode == 0
        assert a.run_inside("cat", f"{state}/mine").stdout.strip() == "pod-a"
        assert b.run_inside("cat", f"{state}/mine").stdout.strip() == "pod-b"
        assert list(state.iterdir()) == []  # the host sees none of it
        assert sorted(p.name for p in shared.iterdir()) == ["pod-a", "pod-b"]  # the share is shared

        a.kill()
        a.start()  # rescheduled: a fresh, empty state dir
        await a.wait_started()
        assert a.run_inside("cat", f"{state}/mine").returncode != 0
        assert b.run_inside("cat", f"{state}/mine").stdout.strip() == "pod-b"
    finally:
        for pod in pods:
            pod.kill()
