"""What every long-lived workflow that takes input from anyone shares (git batcher, merge queue,
Claude batcher, lease lock): start input and messages parsed in code, nothing escaping a handler,
refusals kept as bounded previews, repeats ignored by id, held bytes bounded so continue-as-new
stays small, and continue-as-new at the server's suggestion."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from temporalio import workflow
from temporalio.converter import value_to_type

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.bounded import args_problem, clip, describe_args, json_size

T = TypeVar("T")
R = TypeVar("R")


def parse_state(raw: Any, kind: type[T]) -> T:
    """The state a previous run carried (None: a fresh one); TypeError/ValueError if not one."""
    if raw is None:
        return kind()
    if isinstance(raw, kind):
        return raw
    if not isinstance(raw, dict):
        raise TypeError(f"expected a JSON object, got {type(raw).__name__}")
    return value_to_type(kind, raw)


def parse_start(raw_config: Any, raw_state: Any, parse_config: Callable[[Any], T], blank: Callable[
    [], T], state_kind: type[R], invalid: type[Exception]) -> tuple[T, R, str]:
    """The run's config and carried state, and why they cannot be used ("" when they can): a bad
    start input fails the run with that reason (a converter error would fail every task)."""
    error = ""
    try:
        config = parse_config(raw_config)
    except invalid as err:
        config, error = blank(), str(err)
    try:
        state = parse_state(raw_state, state_kind)
    except Exception as err:  # noqa: BLE001 - any bad carried state fails the run, clearly
        state, error = state_kind(), error or f"bad carried state ({clip(str(err), 200)})"
    return config, state, error


def one_item(args: tuple[Any, ...], what: str, parse: Callable[[Any], T],
             invalid: type[Exception]) -> T:
    """The one item in a message's arguments, or `invalid` saying what is wrong with them."""
    problem = args_problem(args, what)
    if problem:
        raise invalid(problem)
    try:
        return parse(args[0])
    except invalid:
        raise
    except Exception as err:  # noqa: BLE001 - nothing a client sends may escape a handler
        raise invalid(f"unreadable {what.split(' (')[0]} ({type(err).__name__})") from None


def continue_as_new_due(max_history_events: int = 0) -> bool:
    """At the server's suggestion, or past `max_history_events` (a test's hook; 0: none)."""
    info = workflow.info()
    if info.is_continue_as_new_suggested():
        return True
    return bool(max_history_events) and info.get_current_history_length() >= max_history_events


class HasRecentIds(Protocol):
    recent_ids: list[str]


class Inbox:
    """Ids accepted lately (repeats ignored; past twice `keep_ids` the oldest half goes) and bytes
    held until done (an item past `max_bytes` is refused, never dropped once accepted)."""

    def __init__(self, state: HasRecentIds, keep_ids: int, max_bytes: int, what: str) -> None:
        self._state = state
        self._keep = keep_ids
        self._max_bytes = max_bytes
        self._what = what
        self._seen = set(state.recent_ids)
        self._sizes: dict[str, int] = {}
        self.held = 0

    def knows(self, item_id: str) -> bool:
        return item_id in self._seen

    def mark(self, item_id: str) -> None:
        """Known (a repeat is ignored) without joining the recent ids: an item held from before."""
        self._seen.add(item_id)

    def remember(self, item_id: str) -> None:
        self._seen.add(item_id)
        recent = self._state.recent_ids
        recent.append(item_id)
        if len(recent) > 2 * self._keep:
            dropped, self._state.recent_ids = recent[:-self._keep], recent[-self._keep:]
            self._seen.difference_update(dropped)

    def hold(self, item_id: str, item: Any, size: int = 0) -> None:
        size = size or json_size(item)
        self.held += size - self._sizes.get(item_id, 0)
        self._sizes[item_id] = size

    def release(self, item_ids: list[str]) -> None:
        for item_id in item_ids:
            self.held -= self._sizes.pop(item_id, 0)

    def room_problem(self, item_id: str, item: Any) -> str | None:
        """Why one more item cannot be held now (held items are full), or None; repeats are free."""
        if item_id and item_id in self._seen:
            return None
        if self.held + json_size(item) > self._max_bytes:
            return (f"{self.held // 1024} KiB of unfinished {self._what} (limit "
                    f"{self._max_bytes // 1024} KiB): send again once queued batches have landed")
        return None

    def carried_ids(self, max_bytes: int) -> list[str]:
        """The newest ids (at most `keep_ids`, about `max_bytes` as JSON) for the next run."""
        ids, size = [], 0
        for item_id in reversed(self._state.recent_ids[-self._keep:]):
            size += len(item_id) + 3
            if size > max_bytes:
                break
            ids.append(item_id)
        return ids[::-1]


def refuse(kept: list[R], keep: int, handler: str, args: tuple[Any, ...], reason: str,
           make: Callable[[str, Any, str, str], R], chars: int = 500) -> list[R]:
    """`kept` with a bounded preview of the refused message added (built by `make(handler, preview,
    reason, at)`), the newest `keep` kept."""
    reason = clip(reason, chars)
    workflow.logger.warning("%s refused: %s", handler, reason)
    try:
        what = describe_args(args)
    except Exception:  # noqa: BLE001 - a preview never fails the refusal
        what = "<unprintable>"
    return (kept + [make(handler, what, reason, workflow.now().isoformat())])[-keep:]


def trim_to_bytes(items: list[R], max_bytes: int) -> list[R]:
    """The newest of `items` that fit in `max_bytes` of JSON (for what a run carries)."""
    items = list(items)
    while items and json_size(items) > max_bytes:
        items.pop(0)
    return items


def show(title: str, lines: list[str], draining: bool = False) -> None:
    """The Web UI's current details: a bold title, then one line per figure."""
    workflow.set_current_details(
        "\n".join([title, "", *lines, *(["- continuing as new"] if draining else [])]))
