"""The Temporal-native lease lock, on the real dev server: exclusion, FIFO, expiry, fencing, bad
input, continue-as-new. Holders are asyncio tasks, and real processes where a holder must die."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from taskfleet.activities.pods.fence import Fence, StaleLease
from taskfleet.activities.pods.lease import LeaseError, LeaseLock, LeaseLost
from taskfleet.core.lease_lock import lease_lock_workflow_id
from taskfleet.core.models.lease_lock import LEASE_LOST, LEASE_NOT_HELD, LeaseLockConfig
from taskfleet.devserver.server import find_temporal_cli
from taskfleet.versioning import UnversionedRunner
from taskfleet.workflows.lease_lock import LeaseLockWorkflow
from tests.conftest import ROOT, eventually, save_history


def lock_only_worker(client: Client, task_queue: str) -> Worker:
    """A worker running only the lock workflow (unversioned: its declared behavior is cleared)."""
    return Worker(client, task_queue=task_queue, workflows=[LeaseLockWorkflow],
                  workflow_runner=UnversionedRunner(SandboxedWorkflowRunner()))


@pytest.fixture
async def lock_worker(client: Client, task_queue: str):
    async with lock_only_worker(client, task_queue):
        yield


def resource() -> str:
    return f"/shared/clone-{uuid.uuid4().hex[:8]}"


def make_lock(client: Client, task_queue: str, name: str, **kwargs) -> LeaseLock:
    return LeaseLock(client, name, task_queue=task_queue, **kwargs)


async def test_workflow_id_is_readable_and_one_per_resource():
    a = lease_lock_workflow_id("/srv/repos/demo")
    assert a.startswith("taskfleet-lock-demo-") and len(a.rsplit("-", 1)[1]) == 8
    assert a == lease_lock_workflow_id("/srv/repos/demo")
    assert a != lease_lock_workflow_id("/srv/other/demo")


@pytest.mark.smoke
async def test_mutual_exclusion_with_concurrent_holders(
        client: Client, task_queue: str, lock_worker):
    lock = make_lock(client, task_queue, resource(), lease_seconds=10)
    inside = 0
    most = 0
    tokens: list[int] = []

    async def one(i: int) -> None:
        nonlocal inside, most
        async with lock.hold(holder=f"h{i}") as lease:
            inside += 1
            most = max(most, inside)
            tokens.append(lease.token)
            await asyncio.sleep(0.02)  # stay inside a while so overlaps would show
            lease.check()
            inside -= 1

    await asyncio.gather(*(one(i) for i in range(8)))
    assert most == 1
    assert tokens == sorted(tokens) and len(set(tokens)) == 8, tokens
    status = await lock.holders()
    assert status.holder is None and not status.waiters
    assert status.stats.grants == 8 and status.stats.releases == 8 and status.next_token == 9


async def test_waiters_are_served_first_in_first_out(client: Client, task_queue: str, lock_worker):
    lock = make_lock(client, task_queue, resource(), lease_seconds=30)
    first = await lock.acquire("first")
    order: list[str] = []

    async def wait_turn(name: str) -> None:
        lease = await lock.acquire(name)
        order.append(name)
        await lock.release(lease)

    tasks = []
    for name in ("b", "c", "d"):
        tasks.append(asyncio.create_task(wait_turn(name)))

        async def queued(name=name) -> None:
            status = await lock.holders()
            assert name in [w.holder for w in status.waiters], status

        await eventually(queued)
    status = await lock.holders()
    assert [w.holder for w in status.waiters] == ["b", "c", "d"]
    assert status.holder.holder == "first" and status.holder.token == first.token
    await lock.release(first)
    await asyncio.wait_for(asyncio.gather(*tasks), 30)
    assert order == ["b", "c", "d"]
    save_history("lease_lock_fifo", (await lock._handle().fetch_history()).to_json())


HOLDER_SCRIPT = """
import asyncio, sys
from temporalio.client import Client
from taskfleet.activities.pods.lease import LeaseLock

async def main(address, task_queue, resource):
    client = await Client.connect(address)
    lock = LeaseLock(client, resource, task_queue=task_queue, lease_seconds=2)
    async with lock.hold(holder="doomed") as lease:
        print("granted", lease.token, flush=True)
        await asyncio.Event().wait()

asyncio.run(main(*sys.argv[1:]))
"""


async def test_a_killed_holder_never_wedges_the_others(
    client: Client, task_queue: str, server_address: str, lock_worker, tmp_path: Path
):
    name = resource()
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER_SCRIPT, server_address, task_queue, name],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
        assert line.startswith("granted"), line
        doomed_token = int(line.split()[1])
        lock = make_lock(client, task_queue, name, lease_seconds=5)

        async def renewed() -> None:  # the holder's background renewal works while it lives
            status = await lock.holders()
            assert status.holder.holder == "doomed" and status.holder.renewals >= 1, status

        await eventually(renewed)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        lease = await asyncio.wait_for(lock.acquire("survivor"), 30)
        assert lease.token > doomed_token
        status = await lock.holders()
        assert status.stats.expirations == 1 and status.holder.holder == "survivor"
        await lock.release(lease)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_fencing_token_refuses_the_stale_holder(client: Client, task_queue: str, lock_worker,
                                                      tmp_path: Path):
    lock = make_lock(client, task_queue, resource(), lease_seconds=1)
    fence = Fence(tmp_path / "fence")
    # acquire() without hold(): nobody renews, as when a holder is paused or cut off
    stale = await lock.acquire("paused", fence=fence)
    fresh = await asyncio.wait_for(lock.acquire("next", fence=fence), 30)
    assert fresh.token == stale.token + 1
    with pytest.raises(StaleLease, match=f"token {stale.token} is stale"):
        fence.admit(stale.token)
    with pytest.raises(LeaseLost):
        stale.check()
    grant = await lock.renew(stale)
    assert grant.status == LEASE_LOST and "not the current lease" in grant.reason
    fence.admit(fresh.token)  # the current holder goes on
    await lock.release(stale)  # a stale release changes nothing
    assert (await lock.holders()).holder.token == fresh.token
    await lock.release(fresh)
    assert (await lock.holders()).holder is None


async def test_a_lock_whose_history_is_new_grants_above_what_its_fence_has_seen(
    client: Client, task_queue: str, lock_worker, tmp_path: Path
):
    """A lock workflow that starts over (a server restarted in memory, a lock terminated or reset)
    counts from 1 again: the holder tells it the fence's highest token, so its grants are admitted
    without anyone deleting files, and a holder of an older token stays refused."""
    lock = make_lock(client, task_queue, resource(), lease_seconds=30)
    fence = Fence(tmp_path / "fence")
    for _ in range(4):
        async with lock.hold(fence=fence) as lease:
            lease.check()
    old = await lock.acquire("old-history", fence=fence)  # still held when the history ends
    assert old.token == 5 and fence.highest() == 5
    await client.get_workflow_handle(lock.workflow_id).terminate(reason="test: a lock history ends")
    async with lock.hold(fence=fence) as lease:
        assert lease.token == 6, lease.token  # the new history's first grant, above the fence
        lease.check()
        with pytest.raises(StaleLease, match="token 5 is stale: token 6 has acted"):
            old.check()
    assert (await lock.holders()).next_token == 7
    save_history("lease_lock_above_the_fence",
                 (await client.get_workflow_handle(lock.workflow_id).fetch_history()).to_json())
    # one marker, not one per token
    assert sorted(p.name for p in (tmp_path / "fence").iterdir()) == [f"{6:020d}"]


def test_the_fence_keeps_one_marker_whatever_the_number_of_tokens(tmp_path: Path):
    fence = Fence(tmp_path / "fence")
    for token in range(1, 60):
        fence.admit(token)
    assert [p.name for p in (tmp_path / "fence").iterdir()] == [f"{59:020d}"]
    with pytest.raises(StaleLease):
        fence.admit(58)
    assert [p.name for p in (tmp_path / "fence").iterdir()] == [f"{59:020d}"]


async def temporal_cli(address: str, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        find_temporal_cli(), *args, "--address", address,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(errors="replace")


async def test_bad_input_from_the_temporal_cli_never_wedges_the_lock(
    client: Client, task_queue: str, server_address: str, lock_worker, tmp_path: Path
):
    name = resource()
    lock = make_lock(client, task_queue, name, lease_seconds=30)
    held = await lock.acquire("keeper")
    wf = lock.workflow_id
    blob = tmp_path / "blob.json"
    blob.write_text(json.dumps("x" * 1_500_000))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 600 + "]" * 600)
    bad_inputs: list[list[str]] = [
        [],
        ["--input", "42"],
        ["--input", '"a"', "--input", '"b"'],
        ["--input", '{"holder": 5}'],
        ["--input", '{"holder": "x", "lease_seconds": -1}'],
        ["--input", '{"holder": "x", "token": "one"}'],
        ["--input", '{"nonsense": true}'],
        ["--input-file", str(blob)],
        ["--input-file", str(deep)],
        ["--input", "null"],
    ]
    for update in ("acquire", "renew", "release"):
        for args in bad_inputs:
            code, out = await temporal_cli(server_address, "workflow", "update", "execute",
                                           "--workflow-id", wf, "--name", update, *args)
            assert code != 0, (update, args, out)
    for sig in ("renew_lease", "release_lease"):
        for args in bad_inputs:
            code, out = await temporal_cli(server_address, "workflow", "signal", "--workflow-id",
                                           wf, "--name", sig, *args)
            assert code == 0, (sig, args, out)

    async def all_signals_seen() -> None:
        status = await lock.holders()
        assert status.stats.rejected == 2 * len(bad_inputs), status.stats
        return status

    status = await eventually(all_signals_seen)
    assert len(status.rejected) <= 20
    assert all(len(r.message) < 400 for r in status.rejected)
    # Nothing changed and the lock still works, from the CLI as from Python.
    assert status.holder.holder == "keeper" and status.holder.token == held.token
    code, out = await temporal_cli(server_address, "workflow", "update", "execute", "--workflow-id",
                                   wf, "--name", "release", "-o", "json", "--input",
                                   json.dumps({"holder": "keeper", "token": held.token}))
    assert code == 0 and '"released"' in out, out
    again = await lock.acquire("after")
    assert again.token == held.token + 1
    await lock.release(again)
    grant = await lock._handle().execute_update("release", {"holder": "nobody", "token": 3})
    assert grant["status"] == LEASE_NOT_HELD
    description = await lock._handle().describe()
    assert description.status.name == "RUNNING"


async def test_a_refused_acquire_is_one_clear_error(client: Client, task_queue: str, lock_worker):
    lock = make_lock(client, task_queue, resource(), lease_seconds=-3)
    with pytest.raises(LeaseError, match="lease_seconds"):
        await lock.acquire("neg")


async def test_continue_as_new_keeps_the_holder_and_the_waiters(
        client: Client, task_queue: str, lock_worker):
    name = resource()
    lock = make_lock(
        client, task_queue, name, lease_seconds=30, wait_seconds=2,
        config=LeaseLockConfig(resource=name, max_history_events=60),
    )
    first = await lock.acquire("first")
    waiting = [asyncio.create_task(lock.acquire(n)) for n in ("w1",)]

    async def queued(names) -> None:
        status = await lock.holders()
        assert [w.holder for w in status.waiters] == names, status

    await eventually(lambda: queued(["w1"]))
    waiting.append(asyncio.create_task(lock.acquire("w2")))
    await eventually(lambda: queued(["w1", "w2"]))

    async def continued() -> None:
        await lock.renew(first)
        status = await lock.holders()
        assert status.runs >= 2, status.runs

    await eventually(continued, timeout=60)
    status = await lock.holders()
    assert status.holder.holder == "first" and status.holder.token == first.token
    assert [w.holder for w in status.waiters] == ["w1", "w2"]
    await lock.release(first)
    w1 = await asyncio.wait_for(waiting[0], 30)
    assert w1.token == first.token + 1
    await lock.release(w1)
    w2 = await asyncio.wait_for(waiting[1], 30)
    assert w2.token == first.token + 2
    await lock.release(w2)
    # the last run: it started from carried state (holder, waiters, tokens)
    save_history("lease_lock_after_continue_as_new",
                 (await lock._handle().fetch_history()).to_json())


async def test_an_idle_lock_can_close_itself_and_starts_again_on_use(
        client: Client, task_queue: str, lock_worker):
    name = resource()
    lock = make_lock(client, task_queue, name,
                     config=LeaseLockConfig(resource=name, close_after_idle_seconds=1))
    lease = await lock.acquire("once")
    await lock.release(lease)

    async def closed() -> None:
        description = await lock._handle().describe()
        assert description.status.name == "COMPLETED", description.status

    await eventually(closed, timeout=30)
    again = await lock.acquire("later")  # update-with-start: a new run
    assert again.token == 1
    await lock.release(again)


async def test_a_renewal_held_up_by_a_dead_lock_worker_still_counts(
        client: Client, task_queue: str):
    """The lock's own worker dies while a lease is held: the lease's timer fires with nobody to run
    it. The holder's renewal, sent meanwhile, is handled first when a worker is back, so the lease
    is not lost to a delay on the lock's side."""
    lock = make_lock(client, task_queue, resource(), lease_seconds=1)
    async with lock_only_worker(client, task_queue):
        lease = await lock.acquire("steady")

    async def timer_fired() -> None:
        history = await lock._handle().fetch_history()
        assert any(e.HasField("timer_fired_event_attributes") for e in history.events)

    await eventually(timer_fired, timeout=30)
    await lock._handle().signal("renew_lease", {"holder": "steady", "token": lease.token})
    async with lock_only_worker(client, task_queue):
        status = await lock.holders()
        assert status.holder is not None and status.holder.token == lease.token, status
        assert status.stats.expirations == 0 and status.stats.renewals == 1
        await lock.release(lease)


async def test_leaving_hold_while_a_renewal_waits_ends_the_renewal(
        client: Client, task_queue: str):
    """Leaving `hold` cancels its renewals. The client reports an update call cancelled in flight as
    an ordinary error; the renewal loop still ends, so a stopping worker does not wait forever."""
    sent = asyncio.Event()

    class Watched(LeaseLock):
        async def renew(self, lease):
            sent.set()
            return await super().renew(lease)

    lock = Watched(client, resource(), task_queue=task_queue, lease_seconds=6)
    holding = lock.hold("steady", wait_release=False)
    async with lock_only_worker(client, task_queue):
        await holding.__aenter__()
    # No worker runs the lock now: the renewal's update waits at the server for one.
    await asyncio.wait_for(sent.wait(), 30)

    async def update_waiting() -> None:
        described = await lock._handle().describe()
        assert described.raw_description.HasField("pending_workflow_task")

    await eventually(update_waiting, timeout=30)
    await asyncio.wait_for(holding.__aexit__(None, None, None), 30)
