"""Activities for boards by reference: store an inline board, load a page, record outcomes.
The orchestrator never holds a whole board or every outcome: both live in the clone every worker
shares (`taskfleet.core.board_store`, `taskfleet.core.run_store`)."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, fields

from temporalio import activity
from temporalio.exceptions import ApplicationError

from taskfleet.core.board_store import BoardStoreError, read_page, write_board
from taskfleet.core.boards import BoardError, scan_specs
from taskfleet.core.git_objects import GitStoreError, is_repository
from taskfleet.core.models.board_store import (
    BoardPage,
    BoardPageRequest,
    BoardReference,
    OutcomeBatch,
    OutcomePage,
    ReadOutcomesRequest,
    RecordedBatch,
    StoreBoardInput,
)
from taskfleet.core.models.orchestrator import TaskOutcome
from taskfleet.core.names import (
    ACTIVITY_LOAD_BOARD_PAGE,
    ACTIVITY_READ_OUTCOMES,
    ACTIVITY_RECORD_OUTCOMES,
    ACTIVITY_STORE_BOARD,
)
from taskfleet.core.run_store import RunStoreError, append_outcomes, read_outcomes


class BoardStoreActivities:
    @activity.defn(name=ACTIVITY_STORE_BOARD)
    async def store_board(self, params: StoreBoardInput) -> BoardReference:
        """Store a board that came inline (already validated whole by the workflow) in the clone."""
        board = scan_specs(params.board)
        try:
            reference, _ = await asyncio.to_thread(write_board, params.repo, board.head, board.rows,
                                                   board.source)
            return reference
        except (GitStoreError, BoardError) as err:
            raise ApplicationError(f"cannot store the board in {params.repo}: {err}",
                                   type="BoardStoreError",
                                   non_retryable=not is_repository(params.repo)) from None

    @activity.defn(name=ACTIVITY_LOAD_BOARD_PAGE)
    async def load_board_page(self, request: BoardPageRequest) -> BoardPage:
        """Rows from `request.start`, validated one by one: a bad row is refused with its line."""
        if request.start < 0 or request.max_tasks < 1 or request.max_bytes < 1:
            raise ApplicationError(f"bad page request {request.start}+{request.max_tasks}",
                                   type="BoardStoreError", non_retryable=True)
        try:
            return await asyncio.to_thread(read_page, request)
        except BoardStoreError as err:
            # A board that is not there will not appear on a retry.
            raise ApplicationError(str(err), type="BoardStoreError", non_retryable=True) from None

    @activity.defn(name=ACTIVITY_RECORD_OUTCOMES)
    async def record_outcomes(self, batch: OutcomeBatch) -> RecordedBatch:
        """Append the batch to the run's store; a retried batch (same id) is recorded once."""
        rows = batch.rows if len(batch.rows) == len(batch.outcomes) else [-1] * len(batch.outcomes)
        lines = [{**asdict(o), "row": row} for o, row in zip(batch.outcomes, rows)]
        try:
            commit, count, already = await asyncio.to_thread(
                append_outcomes, batch.repo, batch.run_ref, batch.batch_id, lines
            )
        except RunStoreError as err:
            # retryable: a lock may clear
            raise ApplicationError(str(err), type="RunStoreError") from None
        return RecordedBatch(commit=commit, recorded=count, already_recorded=already)

    @activity.defn(name=ACTIVITY_READ_OUTCOMES)
    async def read_outcomes(self, request: ReadOutcomesRequest) -> OutcomePage:
        """A small run's outcomes in board order, for its result; a big run's stay in the store."""
        try:
            found, complete = await asyncio.to_thread(read_outcomes, request.repo, request.run_ref,
                                                      request.max_outcomes, request.max_bytes)
        except RunStoreError as err:
            raise ApplicationError(str(err), type="RunStoreError") from None
        found.sort(key=lambda o: o.get("row", -1))
        return OutcomePage(outcomes=[outcome_from_json(o) for o in found], complete=complete)


def outcome_from_json(data: dict) -> TaskOutcome:
    """A stored outcome: keys of other versions are left out, missing ones take their defaults."""
    return TaskOutcome(**{k: v for k, v in data.items() if k in _OUTCOME_FIELDS})


_OUTCOME_FIELDS = {f.name for f in fields(TaskOutcome)}
