"""The lease lock's ground: its workflow id, and the parsing of every message it takes. Messages may
be typed into the `temporal` CLI, so each parser takes raw positional arguments (any count, any
JSON) and returns a wire type or raises `InvalidLeaseMessage`. Pure and deterministic, for
workflow code."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

from taskfleet.core.ids import slug
from taskfleet.core.models.lease_lock import (
    DEFAULT_LEASE_SECONDS,
    MAX_HOLDER_CHARS,
    MAX_LEASE_SECONDS,
    MAX_TOKEN,
    MAX_WAIT_SECONDS,
    MIN_LEASE_SECONDS,
    AcquireRequest,
    LeaseLockConfig,
    LeaseRef,
)


class InvalidLeaseMessage(ValueError):
    """A message the lease lock refuses; the text is one line a person can act on."""


def lease_lock_workflow_id(resource: str) -> str:
    """`taskfleet-lock-<resource slug>-<8 hex>`: one per resource whatever queue or pod asks."""
    digest = hashlib.sha256(resource.encode()).hexdigest()[:8]
    tail = resource.rstrip("/").rsplit("/", 1)[-1] or resource
    return f"taskfleet-lock-{slug(tail)}-{digest}"


def _one_object(args: Sequence[Any], names: tuple[str, ...], what: str) -> dict[str, Any]:
    """Positional args or one JSON object -> a dict of the given field names."""
    if len(args) == 1 and isinstance(args[0], dict):
        data = dict(args[0])
        unknown = sorted(str(k) for k in data if k not in names)
        if unknown:
            raise InvalidLeaseMessage(f"{what}: unknown field(s) {', '.join(unknown)[:100]}")
        return data
    if not args:
        raise InvalidLeaseMessage(f"{what}: no input; send {{{', '.join(repr(n) for n in names)}}}")
    if len(args) > len(names):
        raise InvalidLeaseMessage(
            f"{what}: {len(args)} inputs, at most {len(names)} ({', '.join(names)})")
    return dict(zip(names, args))


def _holder(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidLeaseMessage(f"{what}: 'holder' must be a non-empty string")
    if len(value) > MAX_HOLDER_CHARS:
        raise InvalidLeaseMessage(f"{what}: 'holder' is longer than {MAX_HOLDER_CHARS} characters")
    if not value.isprintable():
        raise InvalidLeaseMessage(f"{what}: 'holder' has unprintable characters")
    return value


def _seconds(value: Any, name: str, low: float, high: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidLeaseMessage(f"{what}: {name!r} must be a number of seconds")
    if not low <= value <= high:
        raise InvalidLeaseMessage(
            f"{what}: {name!r} must be from {low:g} to {high:g} seconds, got {value:g}")
    return float(value)


def parse_acquire(args: Sequence[Any]) -> AcquireRequest:
    """`{"holder", "lease_seconds"?, "wait_seconds"?, "min_token"?}`, or as positional args."""
    data = _one_object(args, ("holder", "lease_seconds", "wait_seconds", "min_token"), "acquire")
    min_token = data.get("min_token", 0)
    if (isinstance(min_token, bool) or not isinstance(min_token, int)
            or not 0 <= min_token < MAX_TOKEN):
        raise InvalidLeaseMessage(
            f"acquire: 'min_token' must be a whole number from 0 to {MAX_TOKEN - 1}")
    return AcquireRequest(holder=_holder(data.get("holder"), "acquire"), lease_seconds=_seconds(
        data.get("lease_seconds", DEFAULT_LEASE_SECONDS), "lease_seconds", MIN_LEASE_SECONDS,
        MAX_LEASE_SECONDS, "acquire"),
                          wait_seconds=_seconds(data.get("wait_seconds", 5.0), "wait_seconds", 0.0,
                                                MAX_WAIT_SECONDS, "acquire"), min_token=min_token)


def parse_lease_ref(args: Sequence[Any], what: str) -> LeaseRef:
    """`{"holder", "token", "lease_seconds"?}` or `holder, token[, lease_seconds]`."""
    data = _one_object(args, ("holder", "token", "lease_seconds"), what)
    token = data.get("token", 0)
    if isinstance(token, bool) or not isinstance(token, int) or token < 0:
        raise InvalidLeaseMessage(f"{what}: 'token' must be a whole number >= 0")
    lease_seconds = data.get("lease_seconds", 0.0)
    if lease_seconds != 0:
        lease_seconds = _seconds(lease_seconds, "lease_seconds", MIN_LEASE_SECONDS,
                                 MAX_LEASE_SECONDS, what)
    return LeaseRef(holder=_holder(data.get("holder"), what), token=token,
                    lease_seconds=float(lease_seconds))


def parse_config(raw: Any) -> LeaseLockConfig:
    """Start input: `{"resource", "max_history_events"?, "max_waiters"?}` or a resource string."""
    if isinstance(raw, str):
        raw = {"resource": raw}
    if not isinstance(raw, dict):
        raise InvalidLeaseMessage("start input must be an object with 'resource'")
    data = _one_object([raw], ("resource", "max_history_events", "max_waiters",
                               "waiter_grace_seconds", "close_after_idle_seconds"), "start input")
    resource = data.get("resource")
    if not isinstance(resource, str) or not resource.strip() or len(resource) > 4096:
        raise InvalidLeaseMessage(
            "start input: 'resource' must be a non-empty string (at most 4096 characters)")
    config = LeaseLockConfig(resource=resource)
    for name in ("max_history_events", "max_waiters"):
        if name in data:
            value = data[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidLeaseMessage(f"start input: {name!r} must be a whole number >= 0")
            setattr(config, name, value)
    if "waiter_grace_seconds" in data:
        config.waiter_grace_seconds = _seconds(data["waiter_grace_seconds"], "waiter_grace_seconds",
                                               1.0, 3600.0, "start input")
    if data.get("close_after_idle_seconds"):
        config.close_after_idle_seconds = _seconds(data["close_after_idle_seconds"],
                                                   "close_after_idle_seconds", 1.0,
                                                   30 * 86400.0, "start input")
    return config
