"""Continue-as-new for the merge queue: when it is due, and what a run hands to the next (the
queue, the halves, bounded history), between batches with none in flight."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from temporalio import workflow

from taskfleet.workflows.long_lived import Inbox, continue_as_new_due, trim_to_bytes

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.models.merge_queue import MergeQueueConfig, MergeQueueState

CARRIED_RECENT = 20
CARRIED_TAIL = 500
CARRIED_REJECTED_BYTES = 64 * 1024
CARRIED_IDS_BYTES = 96 * 1024


class Handover:
    """Continue-as-new over the workflow's config, state and inbox; `tell` sends what is still to
    be told first. `draining`: the run is ending (nothing new starts; the Web UI says so)."""

    def __init__(self, config: MergeQueueConfig, s: MergeQueueState, inbox: Inbox,
                 tell: Callable[[], Awaitable[None]]) -> None:
        self.config, self.s, self._inbox, self._tell = config, s, inbox, tell
        self.draining = False

    def due(self) -> bool:
        return continue_as_new_due(self.config.max_history_events)

    async def carry(self) -> None:
        """Between batches (none is in flight): carry the queue, the halves and bounded history."""
        self.draining = True
        await workflow.wait_condition(workflow.all_handlers_finished)
        await self._tell()
        s = self.s
        s.runs += 1
        s.recent = s.recent[-CARRIED_RECENT:]
        for outcome in s.recent:
            outcome.output_tail = outcome.output_tail[-CARRIED_TAIL:]
        s.rejected = trim_to_bytes(s.rejected, CARRIED_REJECTED_BYTES)
        s.recent_ids = self._inbox.carried_ids(CARRIED_IDS_BYTES)
        workflow.logger.info("continuing as new with %d queued entries, %d halves", len(s.queue),
                             len(s.halves))
        workflow.continue_as_new(args=[self.config, s])
