"""Worker presence: a crashed worker's worktree registrations are removed by whoever takes its
expired lease, and a live worker's never are. Real dev server, real git,
a real process SIGKILLed."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

from taskfleet.activities.pods.presence import WorkerPresence
from taskfleet.activities.pods.shared_clone import registrations
from tests.conftest import ROOT, GitRemoteFixture, eventually, git
from tests.test_lease_lock import lock_only_worker


@pytest.fixture
async def lock_worker(client: Client, task_queue: str):
    async with lock_only_worker(client, task_queue):
        yield


WORKER_SCRIPT = """
import asyncio, subprocess, sys
from temporalio.client import Client
from taskfleet.activities.pods.presence import WorkerPresence

async def main(address, task_queue, clone, path):
    client = await Client.connect(address)
    presence = WorkerPresence(client, task_queue, pod="pod-x", lease_seconds=2)
    await presence.start()
    subprocess.run(["git", "worktree", "add", "-q", *presence.worktree_add_args(), "--detach", path, "main"],
                   cwd=clone, check=True)
    print("ready", presence.key, flush=True)
    await asyncio.Event().wait()

asyncio.run(main(*sys.argv[1:]))
"""  # noqa: E501 (a script's text)


async def test_only_a_dead_workers_worktrees_are_swept(
    client: Client, task_queue: str, server_address: str, lock_worker,
    git_remote: GitRemoteFixture, tmp_path: Path
):
    fx = git_remote
    alive = WorkerPresence(client, task_queue, pod="pod-y", lease_seconds=2)
    await alive.start()
    sweeper = WorkerPresence(client, task_queue, pod="pod-z", lease_seconds=2,
                             alive_recheck_seconds=0)
    await sweeper.start()
    proc = None
    try:
        live_path = tmp_path / "pod-y" / "w-1"
        git(fx.clone, "worktree", "add", "-q", *alive.worktree_add_args(), "--detach",
            str(live_path), "main")
        dead_path = tmp_path / "pod-x" / "w-1"
        proc = subprocess.Popen(
            [sys.executable, "-c", WORKER_SCRIPT, server_address, task_queue, str(fx.clone),
             str(dead_path)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
        assert line.startswith("ready"), line
        dead_key = line.split()[1]
        assert {r.lease for r in registrations(fx.clone)} == {alive.key, dead_key}

        assert await sweeper.sweep(fx.clone) == []  # both workers are alive: nothing is touched
        proc.send_signal(signal.SIGKILL)
        proc.wait()

        async def swept() -> None:
            assert await sweeper.sweep(fx.clone) == [dead_path]

        await eventually(swept, timeout=30)
        assert [r.lease for r in registrations(fx.clone)] == [alive.key]
        # another pod's folder is not ours to delete (here: visible, kept)
        assert dead_path.exists()
        assert live_path.exists()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        await alive.stop()
        await sweeper.stop()


async def test_a_lost_presence_lease_is_taken_again_under_a_new_key(
    client: Client, task_queue: str, lock_worker, git_remote: GitRemoteFixture, tmp_path: Path
):
    presence = WorkerPresence(client, task_queue, pod="pod-w", lease_seconds=1.5)
    await presence.start()
    try:
        old = presence.key
        git(git_remote.clone, "worktree", "add", "-q", *presence.worktree_add_args(), "--detach",
            str(tmp_path / "w-old"), "main")
        # The lock ends the lease (as when it expired and was taken): the next renewal hears `lost`.
        await presence._lock(presence.pod, old).release(presence.lease)

        async def told_lost() -> None:
            assert presence.lease.lost

        await eventually(told_lost, timeout=30)
        await presence.ensure()
        assert presence.key != old and presence.ready.is_set() and not presence.lease.lost
        # its own old worktree is its pool's to remove
        assert await presence.sweep(git_remote.clone) == []
        assert [r.lease for r in registrations(git_remote.clone)] == [old]
    finally:
        await presence.stop()


async def test_a_presence_lock_that_starts_over_is_not_taken_for_a_dead_workers(
    client: Client, task_queue: str, lock_worker, git_remote: GitRemoteFixture, tmp_path: Path
):
    """The lock of a live worker's presence loses its history (here terminated; a dev server
    restarted in memory does the same): a sweeper that meets the new, empty lock first does not
    take the worker for dead, and the worker takes its lease again under the same key."""
    alive = WorkerPresence(client, task_queue, pod="pod-v", lease_seconds=2)
    await alive.start()
    sweeper = WorkerPresence(client, task_queue, pod="pod-s", lease_seconds=2,
                             alive_recheck_seconds=0)
    await sweeper.start()
    try:
        path = tmp_path / "pod-v" / "w-1"
        git(git_remote.clone, "worktree", "add", "-q", *alive.worktree_add_args(), "--detach",
            str(path), "main")
        lock = alive._lock(alive.pod, alive.key)
        await client.get_workflow_handle(lock.workflow_id).terminate(
            reason="test: the lock's history ends")
        # no lock: that says nothing of its worker
        assert await sweeper.sweep(git_remote.clone) == []

        async def taken_again() -> None:
            status = await lock.holders()
            assert status.holder is not None and status.holder.holder == alive.lease.holder

        await eventually(taken_again, timeout=30)
        assert not alive.lease.lost and alive.key == lock.resource.rsplit("/", 1)[1]
        sweeper._alive.clear()
        assert await sweeper.sweep(git_remote.clone) == []  # held again: alive
        assert [r.lease for r in registrations(git_remote.clone)] == [alive.key]
    finally:
        await alive.stop()
        await sweeper.stop()
