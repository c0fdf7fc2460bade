"""What the long-lived workflows that take input from anyone (the git batcher, the merge queue)
share: hand-parsed carried state, repeats of an id ignored within a bounded memory, refused
messages kept as bounded previews, continue-as-new at the server's suggestion (or a test hook's
history length)."""

from __future__ import annotations

from typing import Any, TypeVar

from temporalio import workflow
from temporalio.converter import value_to_type

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.bounded import clip, describe_args
    from taskfleet.core.models.git_batch import RejectedOp

T = TypeVar("T")


def parse_state(raw: Any, kind: type[T]) -> T:
    """The state a previous run carried (None: a fresh one); TypeError/ValueError if not one."""
    if raw is None:
        return kind()
    if isinstance(raw, kind):
        return raw
    if not isinstance(raw, dict):
        raise TypeError(f"expected a JSON object, got {type(raw).__name__}")
    return value_to_type(kind, raw)


def should_continue_as_new(max_history_events: int) -> bool:
    info = workflow.info()
    if info.is_continue_as_new_suggested():
        return True
    return bool(max_history_events) and info.get_current_history_length() >= max_history_events


def remember_id(recent: list[str], seen: set[str], item_id: str, keep: int) -> list[str]:
    """`recent` with `item_id` added; past twice `keep` ids the oldest go (also from `seen`)."""
    seen.add(item_id)
    recent.append(item_id)
    if len(recent) <= 2 * keep:
        return recent
    dropped, recent = recent[:-keep], recent[-keep:]
    seen.difference_update(dropped)
    return recent


def ids_to_carry(recent: list[str], keep: int, max_bytes: int) -> list[str]:
    """The newest of `recent` (at most `keep`, about `max_bytes` as JSON) for the next run."""
    ids, size = [], 0
    for item_id in reversed(recent[-keep:]):
        size += len(item_id) + 3
        if size > max_bytes:
            break
        ids.append(item_id)
    return ids[::-1]


def refusal(handler: str, args: tuple[Any, ...], reason: str, rejected: list[RejectedOp],
            keep: int) -> list[RejectedOp]:
    """`rejected` with a bounded preview of the refused message (never the raw payload) added."""
    reason = clip(reason, 500)
    workflow.logger.warning("%s refused: %s", handler, reason)
    entry = RejectedOp(op=describe_args(args), reason=reason, at=workflow.now().isoformat(),
                       handler=handler)
    return (rejected + [entry])[-keep:]
