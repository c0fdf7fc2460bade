"""Task worktrees: a pool of checkouts per clone, reused task after task. A slot is moved to the
task's base (only differing files rewritten) and scrubbed off the task's time, not a whole-tree
`worktree add`/`remove` per task; drained at worker stop, branches kept. Beside it: pool_slot,
slot_registration, slot_scrub, slot_settings, slot_leftovers."""

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
from taskfleet.activities.git.worktree_refs import (
    RefWriteRefused,
    checked_out_elsewhere,
    point_branch,
)
from taskfleet.activities.pods.presence import WorkerPresence
from taskfleet.activities.pods.shared_clone import forget_registrations
from taskfleet.core.git_objects import GitStoreError, branch_tip, open_repository
from taskfleet.core.git_objects import resolve as resolve_ref
from taskfleet.core.ids import slug
from taskfleet.core.pod import pod_id

__all__ = ["RUN_TRAILER", "TASK_TRAILER", "BranchCheckedOut", "Worktree", "WorktreePool", "resolve"]

TASK_TRAILER = "Taskfleet-Task"
RUN_TRAILER = "Taskfleet-Run"


class BranchCheckedOut(Exception):
    """The task's branch is checked out in the clone or a person's worktree (named)."""


def resolve(repo_path: str, branch: str, remote: str | None, required: bool = True) -> str:
    """A branch's commit, read in process (libgit2, a handle per thread): no git process, no
    repository object built per call on the event loop. With `remote`, the remote's branch counts
    too (`branch_tip`)."""
    try:
        open_repository(repo_path)
    except GitStoreError:
        raise OpFailed(f"{repo_path} is not a git clone on this worker") from None
    found = (branch_tip(repo_path, branch, remote) if remote
             else resolve_ref(repo_path, f"refs/heads/{branch}"))
    if found:
        return found
    if required:
        raise OpFailed(f"branch {branch} does not exist in {repo_path}"
                       + (f" nor on {remote}" if remote else ""))
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

    async def resumable(self, repo_path: str, branch: str, base_commit: str, task_id: str,
                        run_key: str) -> str:
        """The task's commit if an earlier attempt of this run made it (a retry after a crash)."""
        tip = resolve(repo_path, branch, None, required=False)
        if not tip or tip == base_commit:
            return ""
        ran = await git_run(repo_path, "log", "-1", "--format=%B", tip)
        lines = ran.out.splitlines()
        return (tip if f"{TASK_TRAILER}: {task_id}" in lines
                and f"{RUN_TRAILER}: {run_key}" in lines else "")

    async def take_detached(self, repo_path: str, commit: str,
                            heartbeat: Heartbeat = _nothing) -> Worktree:
        """A clean detached checkout of `commit`, used by no one else: the merge queue verifies its
        merged commits here."""
        return await self.take(repo_path, None, commit, heartbeat)

    async def take(self, repo_path: str, branch: str | None, base_commit: str,
                   heartbeat: Heartbeat = _nothing) -> Worktree:
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
            slot = await add_slot(self.repo_dir(repo_path), repo_path, base_commit, self.pod,
                                  self._lease, self._locks, heartbeat)
            clone.owned.add(slot)
        head = slot.head
        holder, moved = "", False
        if branch is not None:
            try:  # one trip off the event loop: libgit2 ref reads and writes
                holder, moved = await asyncio.to_thread(claim_branch, slot.path, branch,
                                                        base_commit, head == base_commit)
            except BaseException:
                await asyncio.shield(self._discard(slot))
                raise
        if holder:
            clone.free.append(slot)  # untouched: still a clean checkout of its base
            raise BranchCheckedOut(f"branch {branch} is checked out in {holder}: taskfleet never "
                                   "moves a branch a worktree has checked out (check out another "
                                   "branch there, or give the task another branch)")
        slot.head = ""
        try:
            if branch is None:
                # A free slot is a clean checkout detached at `head` (slot_scrub): moving it to
                # another commit rewrites only the files that differ.
                if head != base_commit:
                    ran = await git_run(slot.path, "checkout", "-q", "--detach", base_commit,
                                        heartbeat=heartbeat)
                    if ran.code != 0:
                        await scrub(slot, heartbeat)
                        await git(slot.path, "checkout", "-q", "-f", "--detach", base_commit,
                                  heartbeat=heartbeat)
                slot.begin()
                return Worktree(slot.path, base_commit, slot, time.monotonic() - started, new)
            if head == base_commit:
                # Already a clean checkout of the base: only the branch moved (above), so set-up is
                # two small ref-file writes whatever the size of the tree.
                if not moved:
                    await git(slot.path, "update-ref", "-m", "taskfleet: task branch",
                              f"refs/heads/{branch}", base_commit, heartbeat=heartbeat)
                    await git(slot.path, "symbolic-ref", "HEAD", f"refs/heads/{branch}",
                              heartbeat=heartbeat)
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
        """The implementer's work as a tree (`worktree.tree`) from the touched paths (`known`, else
        the watch), without the index; False when not known here: the caller stages with git."""
        watched = worktree.slot.drain()
        paths = list(known) if known is not None else watched
        if paths is None:
            return False
        try:
            worktree.tree = await asyncio.to_thread(snapshot, worktree.path,
                                                    worktree.base_commit, paths)
        except NotKnown:
            return False
        return True

    def give_back(self, worktree: Worktree) -> None:
        """Scrub the slot off the task's time, then put it back on the free list."""
        self._clones.setdefault(worktree.slot.clone, CloneSlots()).recycling += 1
        task = asyncio.get_running_loop().create_task(
            self._recycle(worktree.slot, worktree.base_commit))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def drain(self) -> None:
        """At worker stop: unregister every slot, then delete its files (moved to `.trash` first, so
        a delete cut short leaves the clone clean; only this pod's registrations go)."""
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
        """First use of a clone: drop dead workers' registrations, off the task's time."""
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

            logging.getLogger("taskfleet.worktrees").warning(
                "sweep of %s failed: %s", clone_path, err)
            return []

    async def sweep(self) -> list[Path]:
        """Drop the registrations of dead workers in every clone this worker has used."""
        removed: list[Path] = []
        for clone_path in list(self._clones):
            removed += await self._sweep(clone_path)
        return removed

    # --- slots -------------------------------------------------------------------------------

    async def _recycle(self, slot: Slot, base_commit: str = "") -> None:
        """Back to a clean checkout of the task's base: the next task on that base (most of a
        board's) then only moves its branch."""
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
        """Remove slots no live worker owns (a crashed worker's); returns what was removed. Runs at
        worker start, after the caller killed leftover executors."""
        return remove_leftovers(self.root, self.pod)


def claim_branch(path: Path, branch: str, base_commit: str, move: bool) -> tuple[str, bool]:
    """Who else has `branch` checked out ("": no one, or unreadable); if no one and `move`, point it
    at `base_commit` with HEAD on it, in one thread trip. Returns (holder, moved)."""
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
