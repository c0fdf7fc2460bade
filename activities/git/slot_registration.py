"""Adding a pool slot to a clone (`git worktree add`) and removing it. A slot is named
`w-<pod>-<random>` (never a task id) with a lock file held while its worker owns it. It is
registered locked under its pod's presence lease, so prune and gc leave it alone, and is removed
alone, never with `git worktree prune` (which would take other pods' registrations too)."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from taskfleet.activities.git import slot_watch
from taskfleet.activities.git.git_async import (
    FileLocks,
    Heartbeat,
    git,
    git_run,
    release,
    try_flock,
)
from taskfleet.activities.git.pool_slot import Slot
from taskfleet.activities.git.slot_settings import slot_settings
from taskfleet.activities.pods.shared_clone import forget_registrations, owner_reason
from taskfleet.core.ids import slug


async def add_slot(folder: Path, repo_path: str, base_commit: str, pod: str,
                   current_lease: Callable[[], str], locks: FileLocks,
                   heartbeat: Heartbeat) -> Slot:
    """A new slot: a clean checkout of `base_commit`, HEAD detached, registered under the lease
    current once the clone's lock is held (a lost lease may be replaced meanwhile)."""
    folder.mkdir(parents=True, exist_ok=True)
    lock_path = folder / ".lock"
    handle = await locks.acquire(lock_path, heartbeat)
    try:
        (folder / "REPO").write_text(os.path.abspath(repo_path))
        while True:
            name = f"w-{slug(pod, 40)}-{secrets.token_hex(4)}"
            if not (folder / name).exists() and not (folder / f"{name}.lock").exists():
                break
        lock = try_flock(folder / f"{name}.lock")
        assert lock is not None, "a fresh lock file is always free"
        lease = current_lease()
        slot = Slot(name, folder / name, os.path.abspath(repo_path), lock, lease)
        try:
            # Only the registration under the clone's lock; the checkout itself (seconds on a
            # large tree) runs after, in parallel with other tasks' checkouts.
            await git(repo_path, "worktree", "add", "-q", "--no-checkout", "--detach", "-f",
                      "--lock", "--reason", owner_reason(pod, lease), str(slot.path), base_commit,
                      heartbeat=heartbeat)
        except BaseException:
            release(lock)
            (folder / f"{name}.lock").unlink(missing_ok=True)
            raise
    finally:
        locks.release(lock_path, handle)
    try:
        await git(slot.path, "reset", "-q", "--hard", heartbeat=heartbeat)
        slot.settings = await slot_settings(slot.path)  # as the clone gives a new worktree
        slot.watch = slot_watch.watch(slot.path)
    except BaseException:
        await asyncio.shield(remove_slot(slot, pod, locks))
        raise
    slot.head = base_commit
    return slot


async def remove_slot(slot: Slot, pod: str, locks: FileLocks) -> None:
    """The slot's files, its registration in the clone and its lock file, gone."""
    slot.close_watch()
    folder = slot.path.parent
    lock_path = folder / ".lock"
    handle = await locks.acquire(lock_path)
    try:
        ran = await git_run(slot.clone, "worktree", "remove", "--force", "--force", str(slot.path))
        if ran.code != 0:  # never `git worktree prune`: it would take other pods' registrations
            shutil.rmtree(slot.path, ignore_errors=True)
            await asyncio.to_thread(forget_registrations, slot.clone, [slot.path], pod)
    finally:
        locks.release(lock_path, handle)
        release(slot.lock)
        (folder / f"{slot.name}.lock").unlink(missing_ok=True)
