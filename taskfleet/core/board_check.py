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
    rows: Iterator[RawTask] = field(default_factory=lambda: iter(()))  # checked as the store reads them
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
    # The notice about --verify goes by the board as given, before the store asks for a default base.
    as_given = BoardHead(format=head.format, name=head.name, rows=head.rows, settings=dict(head.settings))
    checked.rows = _checked_rows(parsed.rows, head, as_given, parsed.source, verify, checked.own_verification)
    return checked


def check_head(head: BoardHead, source: str) -> None:
    """Refuse board-wide settings that would fail every task (BoardError), before anything starts."""
    probe = _with_defaults(TaskSpec(id="x", done=True), head.settings, set(), f"{source}: board-wide settings")
    validate_board(Board(tasks=[probe], **board_wide(head.settings)), source)


def _checked_rows(rows: Iterable[RawTask], head: BoardHead, as_given: BoardHead, source: str, verify: str | None,
                  own: list[str]) -> Iterator[RawTask]:
    """The rows, each passing the board-wide row rules as it is read (BoardError refuses the board),
    while `own` collects the open markdown rows whose cell names a command other than `verify`: only
    a notice, so on a board with a row that cannot run as written none is given."""
    markdown = head.format == "markdown"
    needs_run = markdown and not str(head.settings.get("run", "")).strip()
    unique = _Unique(source)
    notice = markdown and bool(verify)
    for raw in rows:
        if needs_run and raw.row is not None and not raw.row["done"]:
            # A markdown row cannot name a command: without --run no task of the board can run.
            raise BoardError(f"{source}:{raw.line}: task {raw.id} has no run command (set `run`, or --run)")
        unique.add(raw)
        if notice:
            if raw.row is not None and not raw.row["done"] and raw.row.get("verify", verify) != verify:
                own.append(raw.id)
            try:
                task_from_row(raw, as_given, source)
            except BoardError:
                notice = False
                own.clear()
        yield raw


def unique_ids(rows: Iterable[BoardHead | RawTask], source: str) -> Iterator[BoardHead | RawTask]:
    """Refuse the board (BoardError naming both lines) when two tasks share an id or a branch."""
    unique = _Unique(source)
    for item in rows:
        if isinstance(item, RawTask):
            unique.add(item)
        yield item


class _Unique:
    """Task ids and branches seen so far: a second use refuses the board, naming both lines.

    Unlike a malformed task, which fails alone, this is refused before anything starts: the run
    store and landing keep outcomes by task id, and two tasks on one branch would overwrite each
    other. Keeps one entry per task id and branch: the only part of a board the writer holds whole.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.ids: dict[str, int] = {}
        self.branches: dict[str, tuple[str, int]] = {}

    def add(self, raw: RawTask) -> None:
        if raw.row is None:
            return
        task_id, branch = raw.row.get("id"), raw.row.get("branch") or f"task/{raw.row.get('id')}"
        where = f"{self.source}:{raw.line}" if raw.line else f"{self.source}: task #{raw.number}"
        if isinstance(task_id, str):
            if task_id in self.ids:
                raise BoardError(f"{where}: duplicate task id {task_id} (first on line {self.ids[task_id]})")
            self.ids[task_id] = raw.line
        if isinstance(branch, str):
            if branch in self.branches:
                other, line = self.branches[branch]
                raise BoardError(f"{where}: tasks {other} (line {line}) and {task_id} share branch {branch}")
            self.branches[branch] = (str(task_id), raw.line)
