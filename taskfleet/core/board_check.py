"""Stage 2 of reading a board (parse -> check -> store -> start): the CLI's overrides and the board's rules.

`check_board` puts the CLI's board-wide settings (--run, --verify, --land, --max-parallel, ...) over
the file's, and refuses settings that would fail every task before anything starts. A streamed
board's rows then pass the board-wide row rules as they are read (ids and branches unique; a markdown
row needs --run), while a row's own problems are left to fail that task alone, naming its line. A
board checked whole (it goes inline in the run's input) is refused on its first bad row.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from taskfleet.core.board_parse import ParsedBoard
from taskfleet.core.board_rows import BoardHead, RawTask, task_from_row
from taskfleet.core.boards import (
    BoardError,
    _defaults,
    _with_defaults,
    board_wide,
    parse_markdown_board,
    parse_toml_board,
    validate_board,
)
from taskfleet.core.models.orchestrator import Board, TaskSpec


@dataclass
class CheckedBoard:
    """A board that passed its board-wide checks: a streamed one (`head`, `rows`) or a whole one (`board`)."""

    source: str
    settings: Board  # the board-wide settings a run starts with (a streamed board's without tasks)
    head: BoardHead | None = None  # the file's keys with the CLI's overrides on top
    rows: Iterator[RawTask] = iter(())  # read and checked as the store asks for them
    board: Board | None = None  # checked whole: every task valid
    # Open markdown tasks whose Verification cell keeps its own command despite --verify; complete
    # once the rows are read (the cell is the more specific setting, so it wins).
    own_verification: list[str] = field(default_factory=list)


def check_board(parsed: ParsedBoard, **overrides: Any) -> CheckedBoard:
    """The parsed board with `overrides` applied; BoardError when its board-wide part cannot run."""
    verify = overrides.get("verify")
    if parsed.text is not None:
        parse = parse_toml_board if parsed.format == "toml" else parse_markdown_board
        board = parse(parsed.text, source=parsed.source, **overrides)
        board.path = parsed.source
        own = [t.id for t in board.tasks if not t.done and t.verify != verify] if verify and board.format == "markdown" else []
        return CheckedBoard(source=parsed.source, settings=board, board=board, own_verification=own)
    assert parsed.head is not None
    head = BoardHead(format=parsed.head.format, name=parsed.head.name, rows=parsed.head.rows,
                     settings={**parsed.head.settings, **_defaults(overrides)})
    check_head(head, parsed.source)
    settings = Board(tasks=[], name=head.name, path=parsed.source, format=head.format, **board_wide(head.settings))
    checked = CheckedBoard(source=parsed.source, settings=settings, head=head)
    rows: Iterable[RawTask] = parsed.rows
    if head.format == "markdown":
        rows = _markdown_needs_run(rows, head, parsed.source)
        if verify:
            as_given = BoardHead(format=head.format, name=head.name, rows=head.rows, settings=dict(head.settings))
            rows = _own_verification(rows, as_given, parsed.source, verify, checked.own_verification)
    checked.rows = unique_ids(rows, parsed.source)
    return checked


def check_head(head: BoardHead, source: str) -> None:
    """Refuse board-wide settings that would fail every task (BoardError), before anything starts."""
    probe = _with_defaults(TaskSpec(id="x", done=True), head.settings, set(), f"{source}: board-wide settings")
    validate_board(Board(tasks=[probe], **board_wide(head.settings)), source)


def _markdown_needs_run(rows: Iterable[RawTask], head: BoardHead, source: str) -> Iterator[RawTask]:
    for raw in rows:
        if raw.row is not None and not raw.row["done"] and not str(head.settings.get("run", "")).strip():
            # A markdown row cannot name a command: without --run no task of the board can run.
            raise BoardError(f"{source}:{raw.line}: task {raw.id} has no run command (set `run`, or --run)")
        yield raw


def _own_verification(rows: Iterable[RawTask], head: BoardHead, source: str, verify: str,
                      own: list[str]) -> Iterator[RawTask]:
    """Collect into `own` the open rows whose cell names a command other than `verify`. Only a
    notice: on a board with a row that cannot run as written, none is given."""
    valid = True
    for raw in rows:
        if valid and raw.row is not None and not raw.row["done"] and raw.row.get("verify", verify) != verify:
            own.append(raw.id)
        if valid:
            try:
                task_from_row(raw, head, source)
            except BoardError:
                valid = False
                own.clear()
        yield raw


def unique_ids(rows: Iterable[BoardHead | RawTask], source: str) -> Iterator[BoardHead | RawTask]:
    """Refuse the board (BoardError naming both lines) when two tasks share an id or a branch.

    Unlike a malformed task, which fails alone, this is refused before anything starts: the run
    store and landing keep outcomes by task id, and two tasks on one branch would overwrite each
    other. Keeps one entry per task id and branch: the only part of a board the writer holds whole.
    """
    ids: dict[str, int] = {}
    branches: dict[str, tuple[str, int]] = {}
    for item in rows:
        if isinstance(item, RawTask) and item.row is not None:
            task_id, branch = item.row.get("id"), item.row.get("branch") or f"task/{item.row.get('id')}"
            where = f"{source}:{item.line}" if item.line else f"{source}: task #{item.number}"
            if isinstance(task_id, str):
                if task_id in ids:
                    raise BoardError(f"{where}: duplicate task id {task_id} (first on line {ids[task_id]})")
                ids[task_id] = item.line
            if isinstance(branch, str):
                if branch in branches:
                    other, line = branches[branch]
                    raise BoardError(f"{where}: tasks {other} (line {line}) and {task_id} share branch {branch}")
                branches[branch] = (str(task_id), item.line)
        yield item

