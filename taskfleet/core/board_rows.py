"""A board's rows as the store keeps them, and one row to one `TaskSpec`.

`BoardHead` is a board's board-wide part and `RawTask` one task as written (its row, or why the row
cannot be read), each with the line it starts on. `task_from_row` turns one row into a `TaskSpec` by
the rules of `taskfleet.core.boards` (defaults, types, ids, branches), so a page of a stored board is
validated exactly as a whole board is, task by task, and a bad task fails alone naming its line.
Reading a board file is `taskfleet.core.board_parse`'s; the board-wide checks, `board_check`'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from taskfleet.core.boards import (
    QUEUE_KEYS,
    TASK_KEYS,
    BoardError,
    board_wide,
    spec_from_row,
    validate_board,
)
from taskfleet.core.models.orchestrator import Board, TaskSpec

ROWS_TOML = "toml"  # keys as a TOML board allows them
ROWS_SPECS = "specs"  # any TaskSpec field (markdown rows, and boards built in code)
SPEC_KEYS = {f.name for f in fields(TaskSpec)}


@dataclass
class BoardHead:
    """The board-wide part: its format, name and settings (file keys, then the CLI's overrides)."""

    format: str
    name: str
    settings: dict[str, Any] = field(default_factory=dict)
    rows: str = ROWS_TOML


@dataclass
class RawTask:
    """One task as written: its row, or why the row cannot be read."""

    number: int  # 1-based position on the board
    line: int  # the line it starts on (0 when the board was built in code)
    row: dict[str, Any] | None = None
    error: str = ""
    id: str = ""


def scan_specs(board: Board) -> Iterator[BoardHead | RawTask]:
    """A board built in code (or parsed already): its tasks are rows with every field set."""
    settings = {"base": board.base, "max_parallel": board.max_parallel, "land": board.land,
                **{key: getattr(board, key) for key in QUEUE_KEYS}}
    yield BoardHead(format=board.format, name=board.name, settings=settings, rows=ROWS_SPECS)
    for number, task in enumerate(board.tasks, 1):
        yield RawTask(number=number, line=0, row=asdict(task), id=task.id)


def task_from_row(raw: RawTask, head: BoardHead, source: str) -> TaskSpec:
    """The task a row describes, with the board's defaults applied; BoardError naming its line."""
    where = f"{source}:{raw.line}" if raw.line else f"{source}: task #{raw.number}"
    if raw.error:
        raise BoardError(raw.error)
    row = raw.row or {}
    spec = spec_from_row(row, TASK_KEYS if head.rows == ROWS_TOML else SPEC_KEYS, head.settings, where)
    validate_board(Board(tasks=[spec], **board_wide(head.settings)), where)
    return spec


def check_board_settings(board: Board, source: str) -> None:
    """The board-wide rules (land, max_parallel, base) for a board whose tasks are stored apart."""
    probe = TaskSpec(id="x", branch="taskfleet/settings-probe", done=True)
    validate_board(Board(tasks=[probe], base=board.base, max_parallel=board.max_parallel, land=board.land,
                         **{key: getattr(board, key) for key in QUEUE_KEYS}), source)
