"""A parsed board checked: the CLI's overrides over the file's settings, the board-wide rules before
anything starts, then each row as it is read (ids and branches unique; a markdown row needs
--run). A row's own problems fail that task alone; a whole board is refused on its first bad row."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from taskfleet.core.boards.read import (
    BoardError,
    BoardHead,
    ParsedBoard,
    RawTask,
    parse_board_file,
    parse_board_text,
)
from taskfleet.core.boards.rules import (
    ANTHROPIC,
    SPEC_KEYS,
    board_wide,
    check_board_settings,
    spec_from_row,
    task_from_row,
)
from taskfleet.core.models.orchestrator import Board


@dataclass
class CheckedBoard:
    """A board whose board-wide part passed: its rows are checked as they are read."""

    source: str
    settings: Board  # the board-wide settings a run starts with (no tasks)
    head: BoardHead  # the file's keys with the CLI's overrides on top
    rows: Iterator[RawTask]
    board: Board | None = None  # checked whole (`ParsedBoard.whole`): every task valid
    # Open markdown tasks whose Verification cell wins over --verify; complete once rows are read
    own_verification: list[str] = field(default_factory=list)


def check_board(parsed: ParsedBoard, **overrides: Any) -> CheckedBoard:
    """The parsed board with `overrides` applied; BoardError when its board-wide part (or, checked
    whole, any row) cannot run."""
    given = {k: v for k, v in overrides.items() if v not in (None, "")}  # unset: the board's own
    head = replace(parsed.head, settings={**parsed.head.settings, **given})
    # Settings that would fail every task refuse the board before anything starts.
    spec_from_row({"id": "x", "done": True}, SPEC_KEYS, head.settings,
                  f"{parsed.source}: board-wide settings")
    settings = Board(tasks=[], name=head.name, path=parsed.path, format=head.format,
                     **board_wide(head.settings))
    check_board_settings(settings, parsed.source)
    checked = CheckedBoard(parsed.source, settings, head, iter(()))
    # The notice about --verify goes by the board as given, before the store sets a default base.
    as_given = replace(head, settings=dict(head.settings))
    checked.rows = _checked_rows(parsed.rows, head, as_given, parsed.source,
                                 overrides.get("verify"), checked.own_verification)
    if parsed.whole:
        tasks = [task_from_row(raw, head, parsed.source) for raw in checked.rows]
        if not tasks:
            raise BoardError(f"{parsed.source}: the board has no tasks")
        checked.board = replace(settings, tasks=tasks)
    return checked


def load_board(path: Path | str, **overrides: Any) -> Board:
    """A `.md` or `.toml` board file, whole; `overrides` are the CLI's board-wide settings."""
    return _whole(parse_board_file(path, whole=True), overrides)


def parse_toml_board(text: str, source: str = "board.toml", **overrides: Any) -> Board:
    return _whole(parse_board_text(text, source, "toml", whole=True), overrides)


def parse_markdown_board(text: str, source: str = "board.md", **overrides: Any) -> Board:
    """The table with columns ID | Scope | Status | Branch | Verification; status `[ ]` or `[x]`."""
    return _whole(parse_board_text(text, source, "markdown", whole=True), overrides)


def _whole(parsed: ParsedBoard, overrides: dict[str, Any]) -> Board:
    board = check_board(parsed, **overrides).board
    assert board is not None
    return board


def _checked_rows(rows: Iterable[RawTask], head: BoardHead, as_given: BoardHead, source: str,
                  verify: str | None, own: list[str]) -> Iterator[RawTask]:
    """The rows, each passing the board-wide row rules as read (BoardError refuses the board); `own`
    collects open markdown rows whose cell names a command other than `verify`, for a notice."""
    markdown = head.format == "markdown"
    # A markdown row cannot name a command: without --run (or Claude) no task of it can run.
    needs_run = markdown and not str(head.settings.get("run", "")).strip() \
        and head.settings.get("implementer") != ANTHROPIC
    unique = _Unique(source)
    notice = markdown and bool(verify)
    for raw in rows:
        if needs_run and raw.row is not None and not raw.row.get("done") and "run" not in raw.row:
            raise BoardError(f"{source}{raw.where}: task {raw.id} has no run command "
                             "(set `run`, or --run)")
        unique.add(raw)
        if notice:
            row = raw.row or {"done": True}
            if not row["done"] and row.get("verify", verify) != verify:
                own.append(raw.id)
            try:
                task_from_row(raw, as_given, source)
            except BoardError:
                notice = False
                own.clear()
        yield raw


def unique_ids(rows: Iterable[RawTask], source: str) -> Iterator[RawTask]:
    """Refuse the board (BoardError naming both lines) when two tasks share an id or a branch."""
    unique = _Unique(source)
    for raw in rows:
        unique.add(raw)
        yield raw


class _Unique:
    """Task ids and branches seen so far: a second use refuses the board before anything starts
    (outcomes are kept by id; two tasks on one branch would overwrite each other)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.ids: dict[str, int] = {}
        self.branches: dict[str, tuple[str, int]] = {}

    def add(self, raw: RawTask) -> None:
        if raw.row is None:
            return
        task_id, branch = raw.row.get("id"), raw.row.get("branch") or f"task/{raw.row.get('id')}"
        where = f"{self.source}{raw.where}"
        if isinstance(task_id, str):
            if task_id in self.ids:
                raise BoardError(f"{where}: duplicate task id {task_id} "
                                 f"(first on line {self.ids[task_id]})")
            self.ids[task_id] = raw.line
        if isinstance(branch, str):
            if branch in self.branches:
                other, line = self.branches[branch]
                raise BoardError(f"{where}: tasks {other} (line {line}) and {task_id} share branch "
                                 f"{branch}")
            self.branches[branch] = (str(task_id), raw.line)
