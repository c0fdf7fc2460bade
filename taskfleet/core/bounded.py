"""Bounded previews of untrusted values: what a workflow keeps about input it refused. A 1.5 MB
string or JSON nested 600 deep would ride every query and continue-as-new, and recursion can hit
Python's limit: `preview` walks a few levels and a few dozen nodes, a few hundred bytes whatever
it is given."""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 3
MAX_ITEMS = 8
MAX_STRING = 120
MAX_NODES = 40
MAX_PREVIEW_CHARS = 600


def clip(text: str, limit: int = 300) -> str:
    """`text` on one line, cut to about `limit` characters with a note of how much was cut."""
    text = (" | ".join(part for part in str(text).splitlines() if part.strip()) if "\n" in str(text)
            else str(text))
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… (+{len(text) - limit} chars)"


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return f"<object with {len(value)} keys>"
    if isinstance(value, (list, tuple)):
        return f"<list of {len(value)} items>"
    return f"<{type(value).__name__}>"


def preview(value: Any) -> Any:
    """A JSON-compatible copy of `value` with depth, items, strings and node count capped; small
    values come back unchanged, so `status` shows what the person sent."""
    nodes = 0

    def walk(item: Any, depth: int) -> Any:
        nonlocal nodes
        nodes += 1
        if item is None or isinstance(item, (bool, int, float)):
            if isinstance(item, int) and not isinstance(item, bool) and abs(item) > 10**18:
                return clip(str(item)[:200], 40)
            return item
        if isinstance(item, str):
            return clip(item, MAX_STRING) if len(item) > MAX_STRING else item
        if isinstance(item, (dict, list, tuple)):
            if depth >= MAX_DEPTH or nodes >= MAX_NODES:
                return _kind(item)
            if isinstance(item, dict):
                out: dict[str, Any] = {}
                for index, (key, sub) in enumerate(item.items()):
                    if index >= MAX_ITEMS or nodes >= MAX_NODES:
                        out["…"] = f"+{len(item) - index} keys"
                        break
                    out[clip(str(key), 60)] = walk(sub, depth + 1)
                return out
            items: list[Any] = []
            for index, sub in enumerate(item):
                if index >= MAX_ITEMS or nodes >= MAX_NODES:
                    items.append(f"… +{len(item) - index} items")
                    break
                items.append(walk(sub, depth + 1))
            return items
        return _kind(item)

    result = walk(value, 0)
    text = json.dumps(result, ensure_ascii=False)
    if len(text) > MAX_PREVIEW_CHARS:
        return clip(text, MAX_PREVIEW_CHARS - 40)
    return result


def describe_args(args: tuple[Any, ...]) -> Any:
    """A handler's arguments: the one argument itself, `None` for none, a list for several."""
    if len(args) == 1:
        return preview(args[0])
    if not args:
        return None
    return preview(list(args[:MAX_ITEMS]))


def args_problem(args: tuple[Any, ...], what: str) -> str | None:
    """Why `args` is not exactly one argument, in words for the person who sent them, or None."""
    if len(args) == 1:
        return None
    if not args:
        return f"no input: send exactly one {what}"
    return f"{len(args)} inputs: send exactly one {what}"


def json_size(value: Any) -> int:
    """Bytes of `value` as compact JSON (dataclasses as fields), as the data converter sends it."""
    return len(json.dumps(value, default=_fields, separators=(",", ":")))


def _fields(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return {name: getattr(value, name) for name in value.__dataclass_fields__}
    raise TypeError(type(value).__name__)
