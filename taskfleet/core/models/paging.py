"""Wire types a paged run carries: its board's reference, and where it is on that board (apart from
`board_store` so `orchestrator`'s input and state can hold them)."""

# No `from __future__ import annotations`: the data converter resolves these hints on every payload.
from dataclasses import dataclass, field

FAILED_IDS_CAP = 100  # failed task ids a run keeps in its state (all of them are in the run store)


@dataclass
class BoardReference:
    """A board stored in the clone (`taskfleet.core.board_store`): its tree's id, and counts."""

    board_id: str
    tasks: int  # rows on the board, done ones and unreadable ones included
    open_tasks: int = 0  # rows not marked done: what the run dispatches (or fails, if unreadable)
    name: str = "board"
    format: str = "toml"
    source: str = ""  # the file it was read from, for people
    # every worker variable its tasks ask for (`env`): checked against the worker's allow-list first
    env: list[str] = field(default_factory=list)


@dataclass
class PagingState:
    """Where a run is on its stored board, carried across continue-as-new instead of its tasks:
    bounded (counters, first failed ids, where to resume); outcomes are in the run store."""

    board: BoardReference
    run_ref: str
    load_from: int = 0  # the next page's first row
    accounted: int = 0  # rows below this had their refused rows counted and recorded
    counts: dict[str, int] = field(default_factory=dict)  # the run's tally by status, and landed
    failed_ids: list[str] = field(default_factory=list)  # up to FAILED_IDS_CAP
    batches: int = 0  # outcome batches recorded: the next batch's id
    recorded: int = 0  # outcomes in the run store
    group_runs: int = 0  # task groups started
    pushes_forgotten: int = 0  # landed batch ids counted, then dropped from the state
    # rows of tasks still awaiting landing
    awaiting_rows: dict[str, int] = field(default_factory=dict)
