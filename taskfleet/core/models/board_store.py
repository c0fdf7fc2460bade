"""Wire types of boards by reference and the run store: a stored board's reference, its pages, and
batches of outcomes, each bounded so no payload in a run's history grows with the board."""

# No `from __future__ import annotations`: the data converter resolves these hints on every payload.
from dataclasses import dataclass, field

from taskfleet.core.models.orchestrator import (  # noqa: F401 - re-exported
    Board,
    BoardPage,
    RefusedTask,
    TaskOutcome,
    TaskSpec,
)
from taskfleet.core.models.paging import BoardReference, PagingState  # noqa: F401 - re-exported

PAGE_MAX_TASKS = 500
PAGE_MAX_BYTES = 128 * 1024  # tasks in one page: half the 256 KB payload limit
TASK_MAX_BYTES = 224 * 1024  # one task's spec as JSON; a bigger one fails alone
REASON_MAX_CHARS = 300
RECORD_BATCH_OUTCOMES = 200  # outcomes per append to the run store
RESULT_MAX_TASKS = 1000  # a run's result lists its tasks up to this many; past it, the store does


@dataclass
class BoardPageRequest:
    """Rows `start` onwards, at most `max_tasks` of them and `max_bytes` of specs."""

    repo: str
    board_id: str
    start: int
    max_tasks: int = PAGE_MAX_TASKS
    max_bytes: int = PAGE_MAX_BYTES


@dataclass
class StoreBoardInput:
    """A board started inline by hand: stored once, then read by reference, so continue-as-new never
    carries its tasks."""

    repo: str
    board: Board


@dataclass
class OutcomeBatch:
    """Outcomes to append to a run's store; `batch_id` makes a retried append a no-op."""

    repo: str
    run_ref: str
    batch_id: str
    outcomes: list[TaskOutcome] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)  # each outcome's board row (stored as `row`)


@dataclass
class RecordedBatch:
    commit: str
    recorded: int
    already_recorded: bool = False  # a retry found the batch stored by an earlier attempt


@dataclass
class ReadOutcomesRequest:
    """The first outcomes of a run's store, if all of them fit (for a small run's result)."""

    repo: str
    run_ref: str
    max_outcomes: int = RESULT_MAX_TASKS
    max_bytes: int = PAGE_MAX_BYTES


@dataclass
class OutcomePage:
    outcomes: list[TaskOutcome] = field(default_factory=list)  # in board order
    complete: bool = True  # False: more than the request's limits (none listed)
