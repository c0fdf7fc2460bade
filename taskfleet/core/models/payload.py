"""A payload kept out of workflow history: history carries this reference, the store the bytes."""

# No `from __future__ import annotations`: the data converter resolves these hints on every payload.
import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Optional

KEY = re.compile(r"^[0-9a-f]{64}$")


@dataclass
class PayloadRef:
    """A stored payload: `key` is the SHA-256 of its bytes (its checksum too), `size` its length."""

    key: str
    size: int = 0


def ref_of(raw: Any) -> Optional[PayloadRef]:
    """A reference from a payload typed by anyone (a dict or a PayloadRef), or None if not one."""
    if isinstance(raw, PayloadRef):
        raw = raw.__dict__
    if (not isinstance(raw, dict) or not isinstance(raw.get("key"), str)
            or not KEY.match(raw["key"])):
        return None
    size = raw.get("size", 0)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return None
    return PayloadRef(key=raw["key"], size=size)


def compact(value: Any) -> Any:
    """A dataclass as a JSON dict without fields at their defaults: the same value, fewer bytes."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.default is not dataclasses.MISSING and item == f.default:
                continue
            if f.default_factory is not dataclasses.MISSING and item == f.default_factory():
                continue
            out[f.name] = compact(item)
        return out
    if isinstance(value, (list, tuple)):
        return [compact(item) for item in value]
    if isinstance(value, dict):
        return {key: compact(item) for key, item in value.items()}
    return value
