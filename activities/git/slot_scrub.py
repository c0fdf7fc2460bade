"""Bringing a used pool slot back to a clean checkout of a commit, for the next task: only the
touched paths when they are known and the index is the base's, else the whole slot (`reset
--hard`, `clean -ffdx`). The task's branch is kept and HEAD detached: no branch stays checked out
in a free slot."""

from __future__ import annotations

import asyncio

from taskfleet.activities.git.git_async import GitError, Heartbeat, _nothing, git
from taskfleet.activities.git.pool_slot import Slot
from taskfleet.activities.git.slot_settings import index_stamp, settings_files, slot_settings
from taskfleet.activities.git.work_commit import NotKnown, restore_paths
from taskfleet.activities.git.worktree_refs import RefWriteRefused, detach_head


async def scrub(slot: Slot, heartbeat: Heartbeat = _nothing, commit: str = "") -> None:
    """A clean checkout, detached at `commit` (default: where it is); the task branch is kept."""
    try:
        # HEAD detached at the commit by a file write, then one `reset --hard` brings the index
        # and files there (two processes instead of checkout + reset).
        detach_head(slot.path, commit or await git(slot.path, "rev-parse", "HEAD"))
        await git(slot.path, "reset", "-q", "--hard", heartbeat=heartbeat)
    except RefWriteRefused:
        await git(slot.path, "checkout", "-q", "--detach", heartbeat=heartbeat)
        await git(slot.path, "reset", "-q", "--hard", *([commit] if commit else []),
                  heartbeat=heartbeat)
    await git(slot.path, "clean", "-ffdxq", heartbeat=heartbeat)


async def restore_known(slot: Slot, base_commit: str) -> bool:
    """Put back only the touched paths when known and the index is still the base's (no scan of the
    tree); False when that cannot be done, and the caller scrubs in full."""
    slot.drain()
    touched, slot.touched = slot.touched, None
    if touched is None or not base_commit or not slot.index_stamp:
        return False
    if index_stamp(slot.path) != slot.index_stamp or settings_files(slot.path) != slot.settings[:2]:
        return False

    def restore() -> None:
        detach_head(slot.path, base_commit)
        restore_paths(slot.path, base_commit, touched)

    try:
        await asyncio.to_thread(restore)
    except (RefWriteRefused, NotKnown, OSError):
        return False
    return True


async def reusable_at(slot: Slot, base_commit: str) -> bool:
    """Back to a clean checkout of `base_commit`; False when the slot must not be reused: changed
    index flags, own config or sparse patterns (a scrub keeps them), or a failed clean."""
    try:
        if await restore_known(slot, base_commit):
            return True  # same index (so same flags), same config and patterns
        await scrub(slot, commit=base_commit)
        return await slot_settings(slot.path) == slot.settings
    except (GitError, OSError):
        return False
