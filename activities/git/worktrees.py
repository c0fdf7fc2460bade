"""Task worktrees: a pool of checkouts per clone, each reused task after task.

`git worktree add` checks out the whole tree and `remove` deletes it: seconds on a large
repository, and both take the clone's shared files, so they ran one at a time per clone. A pool
slot is instead reset to the task's base with `git checkout -B <branch> <base>`, which rewrites only
the files that differ; after the task, the slot is scrubbed off the task's critical path (only the
paths its commands touched, when its watch knows them and its index is untouched; else `reset
--hard`, `clean -ffdx`) and goes back on the free list; a task that finds no free slot while some
are being scrubbed waits for the first of them rather than checking out a new one (a whole tree).
New slots are added (and old ones removed)
under a per-clone lock that tasks wait for on the event loop, heartbeating.

Slots are named `w-<pod>-<random>` (never a task id, so no two tasks share one whatever their ids,
and no two pods sharing the clone either) and each holds a lock file for as long as its worker owns
it. At worker start, slots whose lock nobody holds are leftovers of a crashed worker: removed. At
worker stop the pool is drained and every slot removed, so no worktree stays registered in the clone.
Branches are always kept.

On a clone shared by pods (activities/pods/shared_clone.py) every slot is registered locked,
owned by this pod and its worker's presence lease: `git worktree prune` (ours never runs it) and gc
leave it alone, and this pool drops only registrations it owns. A crashed worker's registrations
are dropped by whoever takes its expired presence lease (`sweep`).

This module hands slots to tasks and takes them back; the rest lives beside it: a slot and a
clone's free list (pool_slot), adding and removing a slot (slot_registration), cleaning one for the
next task (slot_scrub, with slot_settings: what a task may have set that a scrub keeps), and a
crashed worker's slots (slot_leftovers).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import time
from pathlib import Path

from taskfleet.activities.git.git_async import FileLocks, Heartbeat, _nothing, git, git_run, release
from taskfleet.activities.git.git_op_application import OpFailed
from taskfleet.activities.git.pool_slot import CloneSlots, Slot, Worktree
from taskfleet.activities.git.slot_leftovers import remove_leftovers
from taskfleet.activities.git.slot_registration import add_slot, remove_slot
from taskfleet.activities.git.slot_scrub import reusable_at, scrub
from taskfleet.activities.git.work_commit import NotKnown, snapshot
from taskfleet.activities.git.worktree_refs import RefWriteRefused, checked_out_elsewhere, point_branch
from taskfleet.activities.pods.presence import WorkerPresence
from taskfleet.activities.pods.shared_clone import forget_registrations
from taskfleet.core.git_objects import GitStoreError, open_repository
from taskfleet.core.git_objects import resolve as resolve_ref
from taskfleet.core.ids import slug
from taskfleet.core.pod import pod_id

__all__ = ["RUN_TRAILER", "TASK_TRAILER", "BranchCheckedOut", "Worktree", "WorktreePool", "resolve"]

TASK_TRAILER = "Taskfleet-Task"
RUN_TRAILER = "Taskfleet-Run"


class BranchCheckedOut(Exception):
    """The task's branch is checked out in the clone or a person's worktree; the message says where."""


def resolve(repo_path: str, branch: str, remote: str | None, required: bool = True) -> str:
    """A branch's commit, read in process (libgit2, a handle kept per thread: no git process, and
    no repository object built per call on the event loop)."""
    try:
        open_repository(repo_path)
    except GitStoreError:
        raise OpFailed(f"{repo_path} is not a git clone on this worker") from None
    refs = [f"refs/heads/{branch}"] + ([f"refs/remotes/{remote}/{branch}"] if remote else [])
    for ref in refs:
        found = resolve_ref(repo_path, ref)
        if found:
            return found
    if required:
        raise OpFailed(f"branch {branch} does not exist in {repo_path}" + (f" nor on {remote}" if remote else ""))
    return ""


class WorktreePool:
    def __init__(self, root: Path, pod: str | None = None) -> None:
        self.root = root
        self.pod = pod or pod_id()
        # Set by the worker once it has a client (the plugin's run context): leases, sweeps.
        self.presence: WorkerPresence | None = None
        self._swept: set[str] = set()
        self._locks = FileLocks()
        self._clones: dict[str, CloneSlots] = {}
        self._cleanups: set[asyncio.Task] = set()

    def repo_dir(self, repo: str) -> Path:
        digest = hashlib.sha256(os.path.abspath(repo).encode()).hexdigest()[:8]
        return self.root / f"{slug(os.path.basename(os.path.abspath(repo)))}-{digest}"

    async def resumable(self, repo_path: str, branch: str, base_commit: str, task_id: str, run_key: str) -> str:
        """The task's commit, if an earlier attempt of this same run already made it (a retry after a crash)."""
        tip = resolve(repo_path, branch, None, required=False)
        if not tip or tip == base_commit:
            return ""
        ran = await git_run(repo_path, "log", "-1", "--format=%B", tip)
        lines = ran.out.splitlines()
        return tip if f"{TASK_TRAILER}: {task_id}" in lines and f"{RUN_TRAILER}: {run_key}" in lines else ""

    async def take_detached(self, repo_path: str, commit: str, heartbeat: Heartbeat = _nothing) -> Worktree:
        """A clean checkout of `commit` with a detached HEAD (no branch is made or moved), used by no
        one else: the merge queue verifies its merged commits here."""
        return await self.take(repo_path, None, commit, heartbeat)

    async def take(self, repo_path: str, branch: str | None, base_commit: str, heartbeat: Heartbeat = _nothing) -> Worktree:
        """A checkout of `base_commit` on `branch` (created or reset there; None: detached), used by
        no one else."""
        started = time.monotonic()
        clone = self._clones.setdefault(os.path.abspath(repo_path), CloneSlots())
        if self.presence is not None:
            await self.presence.wait_ready()
            await self.presence.ensure()
            self._sweep_soon(os.path.abspath(repo_path))
        slot = await clone.wait_free(base_commit, heartbeat)
        while slot is not None and slot.lease != self._lease():  # registered under a lost lease
            await asyncio.shield(self._discard(slot))
            slot = await clone.wait_free(base_commit, heartbeat)
        new = slot is None
        if slot is None:
            slot = await add_slot(self.repo_dir(repo_path), repo_path, base_commit, self.pod, self._lease,
                                  self._locks, heartbeat)
            clone.owned.add(slot)
        head = slot.head
        holder, moved = "", False
        if branch is not None:
            try:  # one trip off the event loop: libgit2 reads and writes ref files (a millisecond under load)
                holder, moved = await asyncio.to_thread(claim_branch, slot.path, branch, base_commit, head == base_commit)
            except BaseException:
                await asyncio.shield(self._discard(slot))
                raise
        if holder:
            clone.free.append(slot)  # untouched: still a clean checkout of its base
            raise BranchCheckedOut(
                f"branch {branch} is checked out in {holder}: taskfleet never moves a branch a worktree "
                "has checked out (check out another branch there, or give the task another branch)"
            )
        slot.head = ""
        try:
            if branch is None:
                # A free slot is a clean checkout with HEAD detached at `head` (slot_scrub): moving
                # it to another commit rewrites only the files that differ.
                if head != base_commit:
                    ran = await git_run(slot.path, "checkout", "-q", "--detach", base_commit, heartbeat=heartbeat)
                    if ran.code != 0:
                        await scrub(slot, heartbeat)
                        await git(slot.path, "checkout", "-q", "-f", "--detach", base_commit, heartbeat=heartbeat)
                slot.begin()
                return Worktree(slot.path, base_commit, slot, time.monotonic() - started, new)
            if head == base_commit:
                # Already a clean checkout of the base (scrubbed there off the task's time): only
                # the branch moved (above, with the check). No file is touched and the index is not
                # refreshed, so set-up costs two small ref-file writes whatever the size of the tree
                # (git commands when the files cannot be written in-process).
                if not moved:
                    await git(slot.path, "update-ref", "-m", "taskfleet: task branch", f"refs/heads/{branch}",
                              base_commit, heartbeat=heartbeat)
                    await git(slot.path, "symbolic-ref", "HEAD", f"refs/heads/{branch}", heartbeat=heartbeat)
                slot.begin()
                return Worktree(slot.path, base_commit, slot, time.monotonic() - started, new)
            args = ("checkout", "-q", "--ignore-other-worktrees", "-B", branch, base_commit)
            ran = await git_run(slot.path, *args, heartbeat=heartbeat)
            if ran.code != 0:  # local changes in the way: scrub and force
                await scrub(slot, heartbeat)
                await git(slot.path, "checkout", "-q", "-f", *args[2:], heartbeat=heartbeat)
            slot.begin()
        except BaseException:
            await asyncio.shield(self._discard(slot))
            raise
        return Worktree(slot.path, base_commit, slot, time.monotonic() - started, new)

    async def snapshot(self, worktree: Worktree, known: list[str] | None = None) -> bool:
        """The implementer's work as a tree (`worktree.tree`), from the paths it touched (`known`,
        else the slot's watch), without the index; False when those are not known here: the
        caller stages with git."""
        watched = worktree.slot.drain()
        paths = list(known) if known is not None else watched
        if paths is None:
            return False
        try:
            worktree.tree = await asyncio.to_thread(snapshot, worktree.path, worktree.base_commit, paths)
        except NotKnown:
            return False
        return True

    def give_back(self, worktree: Worktree) -> None:
        """Scrub the slot in the background (off the task's time) and put it back on the free list."""
        self._clones.setdefault(worktree.slot.clone, CloneSlots()).recycling += 1
        task = asyncio.get_running_loop().create_task(self._recycle(worktree.slot, worktree.base_commit))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def drain(self) -> None:
        """At worker stop: unregister every slot from its clone at once, then delete the files.

        Slots are moved into `<clone folder>/.trash` (a rename) and this pod's registrations are
        dropped in one pass (never `git worktree prune`, which would drop other pods' too), so the
        clone is clean even if deleting a large tree is cut short by the worker's shutdown timeout;
        the next start deletes what is left in the trash.
        """
        while self._cleanups:
            await asyncio.gather(*list(self._cleanups), return_exceptions=True)
        trash_dirs = []
        for clone_path, clone in self._clones.items():
            if not clone.owned:
                continue
            folder = self.repo_dir(clone_path)
            trash = folder / ".trash"
            trash.mkdir(parents=True, exist_ok=True)
            paths = [slot.path for slot in clone.owned]
            for slot in list(clone.owned):
                slot.close_watch()
                try:
                    slot.path.rename(trash / slot.name)
                except OSError:
                    shutil.rmtree(slot.path, ignore_errors=True)
                release(slot.lock)
                (folder / f"{slot.name}.lock").unlink(missing_ok=True)
            clone.owned.clear()
            clone.free.clear()
            handle = await self._locks.acquire(folder / ".lock")
            try:  # only our registrations: `git worktree prune` would take other pods' too
                await asyncio.to_thread(forget_registrations, clone_path, paths, self.pod)
            finally:
                self._locks.release(folder / ".lock", handle)
            trash_dirs.append(trash)
        await asyncio.gather(*(asyncio.to_thread(shutil.rmtree, t, True) for t in trash_dirs))

    def slots(self) -> int:
        return sum(len(c.owned) for c in self._clones.values())

    # --- a clone shared by pods -----------------------------------------------------------------

    def _lease(self) -> str:
        return self.presence.key if self.presence is not None else ""

    def _sweep_soon(self, clone_path: str) -> None:
        """First use of a clone by this worker: drop dead workers' registrations, off the task's time."""
        if clone_path in self._swept:
            return
        self._swept.add(clone_path)
        task = asyncio.get_running_loop().create_task(self._sweep(clone_path))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def _sweep(self, clone_path: str) -> list[Path]:
        if self.presence is None or not os.path.isdir(clone_path):
            return []
        try:
            return await self.presence.sweep(clone_path)
        except Exception as err:  # noqa: BLE001 - a sweep is housekeeping: the next one tries again
            import logging

            logging.getLogger("taskfleet.worktrees").warning("sweep of %s failed: %s", clone_path, err)
            return []

    async def sweep(self) -> list[Path]:
        """Drop the registrations of dead workers in every clone this worker has used."""
        removed: list[Path] = []
        for clone_path in list(self._clones):
            removed += await self._sweep(clone_path)
        return removed

    # --- slots -------------------------------------------------------------------------------

    async def _recycle(self, slot: Slot, base_commit: str = "") -> None:
        """Back to a clean checkout of the base the task started from: the next task on that base
        (most of a board's) then only moves its branch (`take`)."""
        clone = self._clones.setdefault(slot.clone, CloneSlots())
        try:
            if not await reusable_at(slot, base_commit):
                await self._discard(slot)
                return
            slot.head = base_commit
            clone.free.append(slot)
        finally:
            clone.scrub_ended()

    async def _discard(self, slot: Slot) -> None:
        clone = self._clones.get(slot.clone)
        if clone is not None:
            clone.owned.discard(slot)
        await remove_slot(slot, self.pod, self._locks)

    def prune_stale(self) -> list[Path]:
        """Remove slots that no live worker owns (a crashed worker's); returns what was removed.

        Runs at worker start, before any task (the caller kills leftover executors first)."""
        return remove_leftovers(self.root, self.pod)


def claim_branch(path: Path, branch: str, base_commit: str, move: bool) -> tuple[str, bool]:
    """Who else has `branch` checked out ("": no one, or a layout this cannot read as files, such
    as reftable); when no one does and `move`, also point the branch at `base_commit` with the
    slot's HEAD on it. Returns (holder, moved): not moved when the refs cannot be written in
    process (the caller uses git). One thread trip for both: each trip waits for a thread and for
    the event loop, longer than the work."""
    try:
        holder = checked_out_elsewhere(path, branch)
    except (RefWriteRefused, OSError, ValueError):
        holder = ""
    if holder or not move:
        return holder, False
    try:
        point_branch(path, branch, base_commit)
    except RefWriteRefused:
        return "", False
    return "", True
