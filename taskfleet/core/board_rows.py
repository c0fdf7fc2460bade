"""Boards read one task at a time: a bad task fails alone, naming its line, and no reader holds the
whole board in memory.

`scan_board` streams a TOML or markdown board's lines into its board-wide settings (a problem there
refuses the board) and one raw row per task, with the line it starts on or the reason it cannot be
read. `task_from_row` turns one row into a `TaskSpec` by the rules of `taskfleet.core.boards`
(defaults, types, ids, branches), so a page of a stored board is validated exactly as a whole
board is, task by task.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from taskfleet.core.boards import (
    BOARD_KEYS,
    MARKDOWN_COLUMNS,
    QUEUE_KEYS,
    TASK_KEYS,
    BoardError,
    board_wide,
    _cells,
    _defaults,
    _with_defaults,
    spec_from_row,
    validate_board,
)
from taskfleet.core.models.orchestrator import Board, TaskSpec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROWS_TOML = "toml"  # keys as a TOML board allows them
ROWS_SPECS = "specs"  # any TaskSpec field (markdown rows, and boards built in code)
SPEC_KEYS = {f.name for f in fields(TaskSpec)}

_TASKS_HEADER = re.compile(r"^\s*\[\[\s*tasks\s*\]\]\s*(#.*)?$")
_INLINE_TASKS = re.compile(r"^\s*tasks\s*=")
_TOML_AT_LINE = re.compile(r"\s*\(at line (\d+), column (\d+)\)")


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

    def to_json(self) -> str:
        data: dict[str, Any] = {"n": self.number, "line": self.line}
        if self.error:
            data.update(id=self.id, error=self.error)
        else:
            data["row"] = self.row
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> RawTask:
        data = json.loads(text)
        return cls(number=data["n"], line=data["line"], row=data.get("row"), error=data.get("error", ""),
                   id=data.get("id", "") or str((data.get("row") or {}).get("id", "")))


# --- scanning ----------------------------------------------------------------------------------


def scan_board(lines: Iterable[str], source: str, fmt: str, **overrides: Any) -> Iterator[BoardHead | RawTask]:
    """Yields the `BoardHead` first, then a `RawTask` per task; BoardError when the board-wide part
    is wrong (nothing could run). `lines` keep their line ends (a file object will do)."""
    if fmt == "markdown":
        return _scan_markdown(lines, source, overrides)
    return _scan_toml(lines, source, overrides)


def scan_text(text: str, source: str, **overrides: Any) -> Iterator[BoardHead | RawTask]:
    fmt = "toml" if source.endswith(".toml") else "markdown"
    return scan_board(text.splitlines(keepends=True), source, fmt, **overrides)


def scan_specs(board: Board) -> Iterator[BoardHead | RawTask]:
    """A board built in code (or parsed already): its tasks are rows with every field set."""
    settings = {"base": board.base, "max_parallel": board.max_parallel, "land": board.land,
                **{key: getattr(board, key) for key in QUEUE_KEYS}}
    yield BoardHead(format=board.format, name=board.name, settings=settings, rows=ROWS_SPECS)
    for number, task in enumerate(board.tasks, 1):
        yield RawTask(number=number, line=0, row=asdict(task), id=task.id)


def _multiline_state(line: str, state: str | None) -> str | None:
    """Whether a line ends inside a TOML multi-line string (`\"\"\"` or `'''`), given where it began.

    Good enough to find table headers: a `[[tasks]]` line inside a multi-line string is text.
    """
    if state is None and '"""' not in line and "'''" not in line:
        return None  # the common line: no multi-line string starts here
    if state is not None and state not in line:
        return state
    i = 0
    while i < len(line):
        if state is None:
            if line.startswith('"""', i) or line.startswith("'''", i):
                state, i = line[i : i + 3], i + 3
                continue
            if line[i] == "#":
                return None
            if line[i] in "\"'":  # a one-line string: skip to its end
                quote, i = line[i], i + 1
                while i < len(line) and line[i] != quote:
                    i += 2 if (quote == '"' and line[i] == "\\") else 1
            i += 1
        else:
            if state == '"""' and line[i] == "\\":
                i += 2
                continue
            if line.startswith(state, i):
                i += 3
                while line.startswith(state[0], i):  # up to two quotes may close with it
                    i += 1
                state = None
                continue
            i += 1
    return state


def _scan_toml(lines: Iterable[str], source: str, overrides: dict[str, Any]) -> Iterator[BoardHead | RawTask]:
    head_lines: list[str] = []
    chunk: list[str] | None = None
    chunk_line = 0
    number = 0
    state: str | None = None
    head: BoardHead | None = None
    for lineno, line in enumerate(lines, 1):
        at_start = state
        state = _multiline_state(line, state)
        if at_start is None and _TASKS_HEADER.match(line):
            if chunk is None:
                head, inline = _toml_head(head_lines, source, overrides)
                if inline:
                    raise BoardError(f"{source}:{lineno}: tasks are given both as `tasks = [...]` and as [[tasks]]")
                yield head
            else:
                number += 1
                yield _toml_task(chunk, chunk_line, number, source)
            chunk, chunk_line = [line], lineno
            continue
        (head_lines if chunk is None else chunk).append(line)
    if chunk is None:  # no [[tasks]] tables: maybe `tasks = [{...}, ...]`, or no tasks at all
        head, inline = _toml_head(head_lines, source, overrides)
        if not inline:
            raise BoardError(f"{source}: no [[tasks]] tables")
        yield head
        where = next((n for n, text in enumerate(head_lines, 1) if _INLINE_TASKS.match(text)), 0)
        for number, row in enumerate(inline, 1):
            yield _checked_row(row, number, where, source)
        return
    number += 1
    yield _toml_task(chunk, chunk_line, number, source)


def _toml_head(lines: list[str], source: str, overrides: dict[str, Any]) -> tuple[BoardHead, list[Any]]:
    try:
        data = tomllib.loads("".join(lines))
    except tomllib.TOMLDecodeError as err:
        raise BoardError(f"{source}: not valid TOML: {err}") from None
    unknown = sorted(set(data) - BOARD_KEYS)
    if unknown:
        raise BoardError(f"{source}: unknown board key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(BOARD_KEYS))}")
    inline = data.pop("tasks", None)
    if inline is not None and (not isinstance(inline, list) or not inline):
        raise BoardError(f"{source}: `tasks` must be a list of tables")
    problem = _json_problem(data)
    if problem:
        raise BoardError(f"{source}: {problem}")
    settings = {**data, **_defaults(overrides)}
    head = BoardHead(format="toml", name=str(settings.get("name") or Path(source).stem), settings=settings)
    check_head(head, source)
    return head, inline or []


def _toml_task(chunk: list[str], first_line: int, number: int, source: str) -> RawTask:
    try:
        data = tomllib.loads("".join(chunk))
    except tomllib.TOMLDecodeError as err:
        message = str(err)
        at = _TOML_AT_LINE.search(message)
        line = first_line + int(at.group(1)) - 1 if at else first_line
        reason = _TOML_AT_LINE.sub("", message)
        return RawTask(number=number, line=first_line, error=f"{source}:{line}: not valid TOML: {reason}",
                       id=_guess_id(chunk))
    extra = sorted(set(data) - {"tasks"})
    if extra:
        return RawTask(number=number, line=first_line, id=_guess_id(chunk), error=(
            f"{source}:{first_line}: table(s) {', '.join(extra)} after [[tasks]]: board-wide keys go before the first [[tasks]]"
        ))
    return _checked_row(data["tasks"][0], number, first_line, source)


def _checked_row(row: Any, number: int, line: int, source: str) -> RawTask:
    if not isinstance(row, dict):
        return RawTask(number=number, line=line, error=f"{source}:{line}: [[tasks]] #{number} must be a table")
    task_id = row.get("id") if isinstance(row.get("id"), str) else ""
    problem = _json_problem(row)
    if problem:
        return RawTask(number=number, line=line, id=task_id, error=f"{source}:{line}: {problem}")
    return RawTask(number=number, line=line, row=row, id=task_id)


def _guess_id(chunk: list[str]) -> str:
    """The `id = "..."` of a task that does not parse, so its failure can still name it."""
    for text in chunk:
        match = re.match(r'^\s*id\s*=\s*["\']([^"\']*)["\']', text)
        if match:
            return match.group(1)
    return ""


def _json_problem(value: Any, key: str = "") -> str:
    """Rows are stored as JSON: TOML dates and times have no place on a board."""
    if isinstance(value, dict):
        for k, v in value.items():
            problem = _json_problem(v, k)
            if problem:
                return problem
    elif isinstance(value, list):
        for v in value:
            problem = _json_problem(v, key)
            if problem:
                return problem
    elif not isinstance(value, (str, int, float, bool)) and value is not None:
        return f"'{key}': a {type(value).__name__} is not a board value"
    return ""


def _scan_markdown(lines: Iterable[str], source: str, overrides: dict[str, Any]) -> Iterator[BoardHead | RawTask]:
    settings = _defaults(overrides)
    head = BoardHead(format="markdown", name=Path(source).stem, settings=settings, rows=ROWS_SPECS)
    columns: list[str] = []
    number = 0
    for lineno, line in enumerate(lines, 1):
        cells = _cells(line)
        if not columns:
            if cells and {c.lower() for c in cells} >= set(MARKDOWN_COLUMNS):
                columns = [c.lower() for c in cells]
                check_head(head, source)
                yield head
            continue
        if not cells:
            if line.strip():
                break  # the table ended
            continue
        if all(set(c) <= set("-: ") for c in cells):
            continue  # the |---|---| separator
        number += 1
        raw = _markdown_task(cells, columns, number, lineno, source)
        if raw.row is not None and not raw.row["done"] and not str(settings.get("run", "")).strip():
            # A markdown row cannot name a command: without --run no task of the board can run.
            raise BoardError(f"{source}:{lineno}: task {raw.id} has no run command (set `run`, or --run)")
        yield raw
    if not columns:
        raise BoardError(
            f"{source}: no task table found; it needs the columns {' | '.join(c.title() for c in MARKDOWN_COLUMNS)}"
        )


def _markdown_task(cells: list[str], columns: list[str], number: int, line: int, source: str) -> RawTask:
    where = f"{source}:{line}"
    if len(cells) != len(columns):
        return RawTask(number=number, line=line, id=cells[0] if cells else "",
                       error=f"{where}: expected {len(columns)} cells, found {len(cells)}")
    cell = dict(zip(columns, cells))
    status = cell["status"].strip().lower()
    if status not in ("[ ]", "[x]", "[]"):
        return RawTask(number=number, line=line, id=cell["id"].strip(),
                       error=f"{where}: status must be [ ] or [x], got {cell['status']!r}")
    verification = cell["verification"].strip()
    command = verification[1:-1] if re.fullmatch(r"`[^`]+`", verification) else ""
    row: dict[str, Any] = {
        "id": cell["id"].strip(),
        "scope": cell["scope"].strip(),
        "branch": cell["branch"].strip().strip("`").strip(),
        "done": status == "[x]",
    }
    if command:
        row["verify"] = command
    elif verification:
        row["acceptance"] = verification
    return RawTask(number=number, line=line, row=row, id=row["id"])


# --- checks ------------------------------------------------------------------------------------


def check_head(head: BoardHead, source: str) -> None:
    """Refuse board-wide settings that would fail every task (BoardError), before anything starts."""
    probe = _with_defaults(TaskSpec(id="x", done=True), head.settings, set(), f"{source}: board-wide settings")
    validate_board(Board(tasks=[probe], **board_wide(head.settings)), source)


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
