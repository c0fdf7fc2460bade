"""Wire types of the lease lock: requests, grants, the `holders` query and `LeaseLockWorkflow`
state. Plain dataclasses with defaults, so fields can be added without breaking older callers."""

# No `from __future__ import annotations`: the data converter resolves these hints on every payload.
from dataclasses import dataclass, field
from typing import Any, Optional

# Statuses of a `LeaseGrant` (plain names, as the seed's).
LEASE_GRANTED = "granted"  # you hold the lease: act under `token`, renew before `expires_at`
LEASE_WAITING = "waiting"  # you are queued at `position`: ask again to keep your place
LEASE_LOST = "lost"  # renew/release of a lease you no longer hold (expired, or another token)
LEASE_RELEASED = "released"  # release of the lease you held, or of your place in the queue
LEASE_NOT_HELD = "not_held"  # release by someone who neither holds nor waits
LEASE_REJECTED = "rejected"  # the message was malformed (`reason` says how); nothing changed

DEFAULT_LEASE_SECONDS = 30.0
MIN_LEASE_SECONDS = 0.5
MAX_LEASE_SECONDS = 24 * 3600.0
# An `acquire` update waits at most this long, then answers `waiting` and the client asks again: so
# updates finish (continue-as-new waits for them) and dead waiters are found.
MAX_WAIT_SECONDS = 60.0
MAX_HOLDER_CHARS = 200
MAX_TOKEN = 2**53  # tokens stay exact in JSON


@dataclass
class LeaseLockConfig:
    """Start input of `LeaseLockWorkflow`: the resource it guards (any string naming it)."""

    resource: str
    # Test hook: continue-as-new past this many events (0: the server's suggestion only).
    max_history_events: int = 0
    # More waiters are refused: a runaway client cannot grow the state without bound.
    max_waiters: int = 1_000
    # Dropped after this long with no `acquire` call in the workflow: well above a call's wait, as
    # the server admits ~10 updates per workflow at once (past ten waiters, some wait a turn).
    waiter_grace_seconds: float = 30.0
    # > 0: end after this long free with nobody waiting (short-lived resources such as a presence; a
    # later acquire starts it again, tokens from 1).
    close_after_idle_seconds: float = 0.0


@dataclass
class AcquireRequest:
    """Input of `acquire`. `holder` is the acquirer's identity: asking again with it is the same
    request, so a retried call keeps its place."""

    holder: str
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    # How long this call may wait in the workflow before answering `waiting` (0: answer at once).
    wait_seconds: float = 5.0
    # The caller's fence's highest token: grant only above it (a new lock history counts from 1).
    min_token: int = 0


@dataclass
class LeaseRef:
    """Input of `renew` / `release` (updates) and `renew_lease` / `release_lease` (signals)."""

    holder: str
    token: int = 0  # 0 in a release: give up a place in the queue (no lease held yet)
    # renew: the new lease length from now (0: the length the lease was granted with)
    lease_seconds: float = 0.0


@dataclass
class LeaseGrant:
    """Answer of `acquire` / `renew` / `release`."""

    status: str
    resource: str = ""
    holder: str = ""
    token: int = 0  # fencing token: strictly increasing per resource, across continue-as-new
    since: str = ""  # ISO-8601 (workflow time) the lease was granted
    expires_at: str = ""  # ISO-8601 (workflow time); renew before
    lease_seconds: float = 0.0
    position: int = 0  # while waiting: 1 = next
    reason: str = ""


@dataclass
class LeaseHolder:
    holder: str
    token: int
    since: str
    expires_at: str
    lease_seconds: float
    renewals: int = 0


@dataclass
class LeaseWaiter:
    holder: str
    lease_seconds: float
    queued_at: str
    # When the waiter last had an `acquire` call in the workflow; one that stops asking is dropped.
    last_seen: str


@dataclass
class RejectedMessage:
    """A message refused by a handler: what it was (bounded) and why."""

    handler: str
    message: str  # repr of what arrived, at most a few hundred characters
    reason: str
    at: str


@dataclass
class LeaseLockStats:
    grants: int = 0
    releases: int = 0
    renewals: int = 0
    expirations: int = 0  # leases that ran out because their holder stopped renewing
    dropped_waiters: int = 0  # waiters that stopped asking
    rejected: int = 0


@dataclass
class LeaseLockState:
    """All that continue-as-new carries: the holder, the FIFO of waiters, the next token."""

    holder: Optional[LeaseHolder] = None
    waiters: list[LeaseWaiter] = field(default_factory=list)
    next_token: int = 1
    stats: LeaseLockStats = field(default_factory=LeaseLockStats)
    rejected: list[RejectedMessage] = field(default_factory=list)
    runs: int = 0
    idle_since: str = ""  # ISO-8601: free with nobody waiting since (for close_after_idle_seconds)


@dataclass
class LeaseLockStatus:
    """Answer of the `holders` query."""

    resource: str
    holder: Optional[LeaseHolder]
    waiters: list[LeaseWaiter]
    next_token: int
    stats: LeaseLockStats
    rejected: list[RejectedMessage]
    runs: int
    now: str = ""  # the workflow's time when it last ran, to read `expires_at` against


def describe(value: Any, limit: int = 300) -> str:
    """A bounded description of whatever arrived (a 1.5 MB blob is kept as its first characters)."""
    try:
        text = repr(value)
    except Exception as err:  # noqa: BLE001 - a repr that fails still gets described
        text = f"<unprintable {type(value).__name__}: {err}>"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"
