"""When the next batch is due (a full window, the oldest entry waited `max_wait_seconds`, or a
flush), and when the run loop wakes to look again (that moment, or the end of a wait after a
failure)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Optional

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.models.merge_queue import MergeQueueConfig, MergeQueueState


def oldest_wait(s: MergeQueueState) -> float:
    """Seconds the head of the queue has waited."""
    return (workflow.now() - datetime.fromisoformat(s.queue[0].enqueued_at)).total_seconds()


def batch_due(s: MergeQueueState, config: MergeQueueConfig, window: int) -> bool:
    """A new batch is due: `window` entries queued, the oldest waited long enough, or a flush."""
    if not s.queue:
        return False
    return (s.flush_requested or len(s.queue) >= window
            or oldest_wait(s) >= config.max_wait_seconds)


def wake_key(s: MergeQueueState) -> tuple[str, str]:
    """What the loop's timer was armed for: a new head or a new retry time arms it again."""
    return (s.queue[0].id if s.queue else "", s.retry_at)


def next_wake(s: MergeQueueState, config: MergeQueueConfig) -> Optional[timedelta]:
    """Until the head is due or the next try after a failure (None: no timer)."""
    waits = []
    if s.queue:
        waits.append(config.max_wait_seconds - oldest_wait(s))
    if s.retry_at:
        waits.append((datetime.fromisoformat(s.retry_at) - workflow.now()).total_seconds())
    return timedelta(seconds=max(min(waits), 0.001)) if waits else None
