"""Nothing accepted by the merge queue is lost or landed twice: a worker SIGKILLed mid-verify or
mid-push, and a stream of entries through continue-as-new."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from taskfleet.clients.merge_queue import MergeQueueClient
from taskfleet.core.models.merge_queue import MergeQueueConfig, QueueEntry
from tests.conftest import GitRemoteFixture, WorkerProcess, eventually, free_port, git, save_history
from tests.test_merge_queue import decided

# kills workers of its own mid-verify, mid-push and mid-speculation
pytestmark = [pytest.mark.slow, pytest.mark.heavy(seconds=60, waits=True)]


def merges_of(fx: GitRemoteFixture, entry_id: str) -> int:
    """How many merge commits on the remote's main carry this entry (landed once: exactly one)."""
    log = git(fx.remote, "log", "--first-parent", "--format=%B%x00", "main")
    return sum(1 for message in log.split("\0")
               if f"Taskfleet-Queue-Entry: {entry_id}" in message.splitlines())


def activity_attempts(history, name: str) -> list[int]:
    scheduled = {}
    attempts = []
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            scheduled[
                event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
        if event.HasField("activity_task_started_event_attributes"):
            started = event.activity_task_started_event_attributes
            if scheduled.get(started.scheduled_event_id) == name:
                attempts.append(started.attempt)
    return attempts


def worker_args(server_address: str, task_queue: str, tmp_path: Path) -> tuple[str, ...]:
    return ("--address", server_address, "--task-queue", task_queue)


def pod(tmp_path: Path, name: str) -> dict:
    """A worker process as a pod of its own: its own state dir and pod id (the clone is shared)."""
    return {"args": ("--state-dir", str(tmp_path / name)), "env": {"TASKFLEET_POD_ID": name}}


async def kill_a_worker_once(args: tuple[str, ...], tmp_path: Path, connect, branches: dict[
    str, str], marker: Path, pods: tuple[dict, dict]) -> None:
    """Start a worker process, send every branch as an entry (`connect()` gives the queue client
    once the worker is up), and SIGKILL the worker with its children as soon as `marker` exists."""
    first = WorkerProcess(*args, *pods[0]["args"], log=tmp_path / "worker1.log", env=pods[0]["env"])
    await first.wait_started()
    q = await connect()
    for branch, commit in branches.items():
        await q.enqueue(QueueEntry(branch=branch, expect_commit=commit, id=branch))

    async def reached() -> None:
        assert marker.exists(), f"{marker.name} has not appeared yet"

    await eventually(reached)
    first.kill_group()


async def decided_on_a_second_worker(args: tuple[str, ...], tmp_path: Path, connect, count: int,
                                     pods: tuple[dict, dict]):
    """A second worker process takes over; the queue's status once `count` entries are answered, and
    its history."""
    second = WorkerProcess(*args, *pods[1]["args"], log=tmp_path / "worker2.log",
                           env=pods[1]["env"])
    try:
        await second.wait_started()
        q = await connect()
        await q.flush()
        return await decided(q, count, timeout=120), await q.handle.fetch_history(), second.output()
    finally:
        second.kill_group()


async def test_worker_killed_mid_verify_every_entry_lands_once(
        client: Client, server_address: str, task_queue: str, git_remote: GitRemoteFixture,
        tmp_path: Path):
    fx = git_remote
    started = tmp_path / "verify-started"
    # The first verify hangs (until its worker is killed); the verify run again on the next
    # worker passes.
    verify = f'if [ ! -e "{started}" ]; then touch "{started}"; sleep 600; fi; test -f README.md'
    branches = fx.many_branches("kill", 4)
    q = MergeQueueClient(
        client, MergeQueueConfig(repo=str(fx.clone), target="main", verify=verify, max_batch=4,
                                 max_wait_seconds=3600, heartbeat_timeout_seconds=2), task_queue)
    args = worker_args(server_address, task_queue, tmp_path)

    async def connect() -> MergeQueueClient:
        return q

    # the verify is run again on another pod
    pods = (pod(tmp_path, "pod-a"), pod(tmp_path, "pod-b"))
    await kill_a_worker_once(args, tmp_path, connect, branches, started, pods)
    status, history, _ = await decided_on_a_second_worker(args, tmp_path, connect, 4, pods)
    logs = lambda name: list((tmp_path / name / "logs" / "queue").rglob("*.log"))  # noqa: E731
    assert [p.name for p in logs("pod-a")] == ["batch-1-1.log"] and [
        p.name for p in logs("pod-b")] == ["batch-1-2.log"]
    # retried once, on the next worker
    assert activity_attempts(history, "taskfleet_queue_verify") == [2]
    assert (status.stats.landed, status.stats.verify_runs, status.stats.pushes) == (
        4, 1, 1), status.stats
    assert fx.pushes() == 1
    for branch in branches:
        assert merges_of(fx, branch) == 1, branch


async def test_worker_killed_mid_push_lands_nothing_twice(
        client: Client, server_address: str, task_queue: str, git_remote: GitRemoteFixture,
        tmp_path: Path):
    fx = git_remote
    pushed = tmp_path / "pushed"
    # The remote has taken the push (main moved), but holds the pusher until the test kills it:
    # the worker dies without learning that its push landed.
    fx.install_hook("post-receive", f'cat > /dev/null\ntouch "{pushed}"\nsleep 600\n')
    branches = fx.many_branches("push", 3)
    q = MergeQueueClient(
        client, MergeQueueConfig(repo=str(fx.clone), target="main", verify="true", max_batch=3,
                                 max_wait_seconds=3600, heartbeat_timeout_seconds=2), task_queue)
    args = worker_args(server_address, task_queue, tmp_path)

    async def connect() -> MergeQueueClient:
        return q

    pods = (pod(tmp_path, "pod-a"), pod(tmp_path, "pod-b"))
    await kill_a_worker_once(args, tmp_path, connect, branches, pushed, pods)
    landed_tip = git(fx.remote, "rev-parse", "main")
    (fx.remote / "hooks" / "post-receive").unlink()
    status, history, _ = await decided_on_a_second_worker(args, tmp_path, connect, 3, pods)
    assert activity_attempts(history, "taskfleet_queue_push") == [2]
    assert fx.pushes() == 1, "the retried push must find its commit on the remote, not push again"
    assert git(fx.remote, "rev-parse", "main") == landed_tip
    assert all(o.status == "landed" and o.commit == landed_tip
               for o in status.recent), status.recent
    for branch in branches:
        assert merges_of(fx, branch) == 1, branch


async def test_entries_streaming_through_continue_as_new_land_once(
        client: Client, make_worker, task_queue: str, git_remote: GitRemoteFixture):
    fx = git_remote
    branches = fx.many_branches("can", 120)
    q = MergeQueueClient(
        client, MergeQueueConfig(repo=str(fx.clone), target="main", verify="test -f README.md",
                                 max_batch=8, max_wait_seconds=0.2, max_history_events=80),
        task_queue)
    async with make_worker():
        for branch, commit in branches.items():
            entry = QueueEntry(branch=branch, expect_commit=commit, id=branch)
            await q.enqueue(entry)
            await q.enqueue(entry)  # a repeat is ignored, on either side of a continue-as-new
        status = await decided(q, len(branches), timeout=240)
        description = await q.handle.describe()
        save_history("merge_queue_after_continue_as_new",
                     (await q.handle.fetch_history()).to_json())
    assert status.runs > 2, status.runs
    assert status.stats.entries == len(branches) and status.stats.landed == len(
        branches), status.stats
    assert description.raw_description.workflow_execution_info.history_length < 400
    assert fx.pushes() == status.stats.pushes
    for branch in branches:
        assert merges_of(fx, branch) == 1, branch


async def test_a_server_restart_mid_verify_loses_no_entry(git_remote: GitRemoteFixture,
                                                          tmp_path: Path):
    """The queue lives in the server's history: with the server (its SQLite file) and the worker
    killed outright mid-verify and started again, every entry lands, once."""
    fx = git_remote
    started = tmp_path / "verify-started"
    verify = f'if [ ! -e "{started}" ]; then touch "{started}"; sleep 600; fi; test -f README.md'
    port = free_port()
    args = ("--dev", "--address", f"127.0.0.1:{port}", "--ui-port", str(free_port()),
            "--task-queue", "restart")
    # the server's SQLite file lives in the state dir: the same one again
    same = pod(tmp_path, "state")
    config = MergeQueueConfig(repo=str(fx.clone), target="main", verify=verify, max_batch=2,
                              max_wait_seconds=3600, heartbeat_timeout_seconds=2)
    branches = fx.many_branches("restart", 3)

    async def connect() -> MergeQueueClient:  # a new connection to whichever server is up now
        return MergeQueueClient(await Client.connect(f"127.0.0.1:{port}"), config, "restart")

    # the server dies with it
    await kill_a_worker_once(args, tmp_path, connect, branches, started, (same, same))
    status, _, output = await decided_on_a_second_worker(args, tmp_path, connect, 3, (same, same))
    assert "started the embedded dev server" in output
    assert status.stats.landed == 3 and status.stats.entries == 3, status.stats
    for branch in branches:
        assert merges_of(fx, branch) == 1, branch


def hang_once_per_batch(marks: Path) -> str:
    """A verify whose first run of each batch hangs until its worker is killed (`marks/../killed`
    then exists); runs again, and batches after the kill, pass."""
    killed = marks.parent / "killed"
    return (f'm="{marks}/$TASKFLEET_QUEUE_BATCH"; if [ ! -e "$m" ] && [ ! -e "{killed}" ]; then '
            'touch "$m"; sleep 600; fi; test -f README.md')


async def test_worker_killed_mid_speculation_every_entry_lands_once(
    client: Client, server_address: str, task_queue: str, git_remote: GitRemoteFixture,
    tmp_path: Path,
):
    """Three batches verifying at once, each stacked on the one ahead, when the worker is SIGKILLed:
    another worker runs them again, every entry lands once, main only moves forward."""
    fx = git_remote
    marks = tmp_path / "marks"
    marks.mkdir()
    fx.install_hook("pre-receive", (
        'while read old new ref; do git merge-base --is-ancestor "$old" "$new" || exit 1; done\n'
        f'echo push >> "{fx.push_log}"\n'))
    branches = fx.many_branches("spec", 4)
    config = MergeQueueConfig(repo=str(fx.clone), target="main", verify=hang_once_per_batch(marks),
                              max_batch=1, parallel=3, max_wait_seconds=3600,
                              heartbeat_timeout_seconds=2)
    q = MergeQueueClient(client, config, task_queue)
    args = worker_args(server_address, task_queue, tmp_path)

    async def connect() -> MergeQueueClient:
        return q

    pods = (pod(tmp_path, "pod-a"), pod(tmp_path, "pod-b"))
    await kill_a_worker_once(args, tmp_path, connect, branches, marks / "batch-3", pods)
    (tmp_path / "killed").touch()
    # all three were in flight
    assert sorted(p.name for p in marks.iterdir()) == ["batch-1", "batch-2", "batch-3"]
    status, history, _ = await decided_on_a_second_worker(args, tmp_path, connect, 4, pods)
    # each run again, once
    assert activity_attempts(history, "taskfleet_queue_verify").count(2) == 3
    assert status.stats.landed == 4 and status.stats.entries == 4, status.stats
    assert fx.pushes() == status.stats.pushes and not status.batches
    for branch in branches:
        assert merges_of(fx, branch) == 1, branch


async def test_a_server_restart_mid_speculation_loses_no_entry(git_remote: GitRemoteFixture,
                                                              tmp_path: Path):
    """Speculation lives in the server's history: with the server and the worker killed outright
    while three stacked batches verify, and both started again, every entry lands, once."""
    fx = git_remote
    marks = tmp_path / "marks"
    marks.mkdir()
    port = free_port()
    args = ("--dev", "--address", f"127.0.0.1:{port}", "--ui-port", str(free_port()),
            "--task-queue", "restart")
    same = pod(tmp_path, "state")
    config = MergeQueueConfig(repo=str(fx.clone), target="main", verify=hang_once_per_batch(marks),
                              max_batch=1, parallel=3, max_wait_seconds=3600,
                              heartbeat_timeout_seconds=2)
    branches = fx.many_branches("respec", 4)

    async def connect() -> MergeQueueClient:
        return MergeQueueClient(await Client.connect(f"127.0.0.1:{port}"), config, "restart")

    await kill_a_worker_once(args, tmp_path, connect, branches, marks / "batch-3", (same, same))
    (tmp_path / "killed").touch()
    status, _, output = await decided_on_a_second_worker(args, tmp_path, connect, 4, (same, same))
    assert "started the embedded dev server" in output
    assert status.stats.landed == 4 and status.stats.entries == 4, status.stats
    for branch in branches:
        assert merges_of(fx, branch) == 1, branch
