"""What a git batcher run carries into the next when it continues as new, kept within bounds.

A clone's batcher never ends: it continues as new, and its state travels as the next run's input,
which must stay far under the server's 2 MB payload limit whatever clients send. Accepted ops
still held are bounded at intake (workflows/git_batcher_intake.py); beside them a run carries at
most CARRIED_EXECUTED_BYTES of compacted recent batches, CARRIED_REJECTED_BYTES of rejection
previews and CARRIED_IDS_BYTES of recent op ids: about 1 MiB in the worst case. Nothing accepted
and unfinished is ever cut.

Used by `GitBatchWorkflow` (workflows/git_batcher.py).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.bounded import clip, json_size
    from taskfleet.core.models.git_batch import GitBatchState

from taskfleet.workflows.git_batcher_batches import ERROR_CHARS, RECENT_BATCHES, compact_batch
from taskfleet.workflows.git_batcher_intake import RECENT_IDS
from taskfleet.workflows.intake import ids_to_carry

CARRIED_EXECUTED_BYTES = 64 * 1024
CARRIED_REJECTED_BYTES = 64 * 1024
CARRIED_IDS_BYTES = 96 * 1024


def compact_for_carry(s: GitBatchState) -> None:
    """Shrink what the next run gets to the bounds above; nothing accepted and unfinished is cut."""
    executed = [compact_batch(b) for b in s.executed_batches[-RECENT_BATCHES:]]
    while executed and json_size(executed) > CARRIED_EXECUTED_BYTES:
        executed.pop(0)
    s.executed_batches = executed
    for batch in s.failed_batches:
        # Every op's outcome only repeats the batch's error; the error itself is kept.
        batch.outcomes = []
        batch.error = clip(batch.error, ERROR_CHARS)
    while s.rejected and json_size(s.rejected) > CARRIED_REJECTED_BYTES:
        s.rejected.pop(0)
    s.recent_ids = ids_to_carry(s.recent_ids, RECENT_IDS, CARRIED_IDS_BYTES)
