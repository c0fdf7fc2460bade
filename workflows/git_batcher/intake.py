"""What makes a message one acceptable git op, and what a refused one's sender is told (a `failed`
outcome, when it named `reply_to`, so no caller waits for nothing)."""

from __future__ import annotations

from typing import Any, Optional

from temporalio import workflow

from taskfleet.workflows.long_lived import Inbox, one_item

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.git_op_validation import InvalidGitOp, parse_git_op
    from taskfleet.core.models.git_batch import OUTCOME_FAILED, GitOp, OpOutcome
    from taskfleet.core.names import FLUSH_AFTER

MAX_OPS_PER_SIGNAL = 500  # ops one `enqueue` signal may carry as a list
MAX_FLUSH_AFTER_IDS = 1000  # op ids one `flush({"after": [...]})` may name
FLUSHES_WAITING = 100  # `flush({"after": ...})` held at once (the oldest is dropped past it)
RECENT_REJECTIONS = 100
RECENT_IDS = 5_000  # op ids remembered, so a repeat is ignored
# Accepted ops still held (queued, pending, failed) up to this much JSON; one op is at most 64 KiB
# (a ~350-byte landing op: ~2,200 fit).
HELD_OPS_BYTES = 768 * 1024
FAILED_BATCH_OVERHEAD = 2 * 1024  # what a failed batch adds to the held bytes, beside its ops
REASON_CHARS = 500


def parse_op(args: tuple[Any, ...], inbox: Inbox) -> GitOp:
    """The one git op in a message's arguments, or InvalidGitOp saying what is wrong with them."""
    op = one_item(args, "git op (a JSON object)", parse_git_op, InvalidGitOp)
    room = inbox.room_problem(op.id, op)
    if room:
        raise InvalidGitOp(f"the batcher holds {room}")
    return op


def refusal_notice(args: tuple[Any, ...], reason: str) -> Optional[tuple[str, OpOutcome]]:
    """A refused op that names `reply_to` and `id`: its sender and the `failed` outcome it gets."""
    raw = args[0] if len(args) == 1 else None
    if not isinstance(raw, dict):
        return None
    listener, op_id = raw.get("reply_to"), raw.get("id")
    if not (isinstance(listener, str) and isinstance(op_id, str) and 0 < len(listener) <= 1000
            and 0 < len(op_id) <= 200):
        return None
    op_type, branch = raw.get("op_type"), raw.get("branch")
    outcome = OpOutcome(
        op_id=op_id,
        op_type=op_type if isinstance(op_type, str) and len(op_type) < 20 else "",
        branch=branch if isinstance(branch, str) and len(branch) <= 255 else "",
        status=OUTCOME_FAILED,
        reason=f"refused by the git batcher: {reason}",
    )
    return listener, outcome


def flush_after(args: tuple[Any, ...]) -> Optional[frozenset[str]]:
    """The op ids of `flush({"after": [op ids]})`, or None: flush now (no input or any other, as
    `flush` always took any input)."""
    if len(args) != 1 or not isinstance(args[0], dict):
        return None
    ids = args[0].get(FLUSH_AFTER)
    if not isinstance(ids, list) or not 0 < len(ids) <= MAX_FLUSH_AFTER_IDS:
        return None
    if not all(isinstance(op_id, str) and 0 < len(op_id) <= 200 for op_id in ids):
        return None
    return frozenset(ids)
