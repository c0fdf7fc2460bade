"""What makes a message one acceptable queue entry, and what a refused one's sender is told (a
`rejected` outcome, when it named `reply_to` and `id`, so no caller waits for nothing)."""

from __future__ import annotations

from typing import Any, Optional

from temporalio import workflow

from taskfleet.workflows.long_lived import Inbox, one_item
from taskfleet.workflows.merge_queue.outcomes import REASON_CHARS as OUTCOME_REASON_CHARS

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.bounded import clip, json_size
    from taskfleet.core.merge_queue_validation import InvalidQueueEntry, parse_entry
    from taskfleet.core.models.merge_queue import (
        ENTRY_REJECTED,
        EntryOutcome,
        MergeQueueConfig,
        QueueEntry,
    )

RECENT_REJECTIONS = 50
RECENT_IDS = 5_000
# What one run may carry into the next stays far under the server's 2 MB payload limit: accepted
# entries still unanswered (queued or in halves) up to HELD_BYTES (new entries are refused past it,
# never dropped once accepted; an entry is at most 16 KiB), plus bounded recent outcomes, refusal
# previews and ids. A task's entry is ~400 bytes: about 1,900 fit.
HELD_BYTES = 768 * 1024
REASON_CHARS = 500


def verify_of(entry: QueueEntry, config: MergeQueueConfig) -> str:
    """The entry's verify command, or the queue's."""
    return entry.verify or config.verify


def parse_queue_entry(args: tuple[Any, ...], config: MergeQueueConfig, inbox: Inbox) -> QueueEntry:
    """The one entry in a message's arguments, or InvalidQueueEntry saying what is wrong."""
    entry = one_item(args, "entry (a JSON object with branch and expect_commit)", parse_entry,
                     InvalidQueueEntry)
    if entry.branch == config.target:
        raise InvalidQueueEntry(f"cannot land {entry.branch} into itself")
    if not verify_of(entry, config).strip():
        raise InvalidQueueEntry(
            "no verify command: give the entry 'verify', or start the queue with one")
    if not (entry.id and inbox.knows(entry.id)) and inbox.held + json_size(entry) > HELD_BYTES:
        raise InvalidQueueEntry(
            f"the queue holds {inbox.held // 1024} KiB of unanswered entries (limit "
            f"{HELD_BYTES // 1024} KiB): send again once queued batches have landed")
    return entry


def refusal_notice(args: tuple[Any, ...], reason: str,
                   target: str) -> Optional[tuple[str, EntryOutcome]]:
    """A refused entry that names `reply_to` and `id`: its sender and the `rejected` outcome it
    gets at once."""
    raw = args[0] if len(args) == 1 else None
    if not isinstance(raw, dict):
        return None
    listener, entry_id, branch = raw.get("reply_to"), raw.get("id"), raw.get("branch")
    if not (isinstance(listener, str) and isinstance(entry_id, str) and 0 < len(listener) <= 1000
            and 0 < len(entry_id) <= 200):
        return None
    outcome = EntryOutcome(
        entry_id=entry_id, branch=branch if isinstance(branch, str) and len(branch) <= 255 else "",
        status=ENTRY_REJECTED,
        reason=f"refused by the merge queue: {clip(reason, OUTCOME_REASON_CHARS)}",
        target=target, decided_at=workflow.now().isoformat(),
    )
    return listener, outcome
