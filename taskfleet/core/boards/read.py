"""A board file read as a stream: its board-wide part (`BoardHead`), then one `RawTask` per task
with its line, or why it cannot be read. No reader holds a board whole; a board-wide problem
refuses it (BoardError), a row's travels with that row."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from taskfleet.core.boards.keys import BOARD_FIELDS, BOARD_KEYS
from taskfleet.core.models.orchestrator import Board

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

MARKDOWN_COLUMNS = ("id", "scope", "status", "branch", "verification")
ROWS_TOML = "toml"  # keys as a TOML board allows them
ROWS_SPECS = "specs"  # any TaskSpec field (markdown rows, and boards built in code)
_TASKS_HEADER = re.compile(r"^\s*\[\[\s*tasks\s*\]\]\s*(#.*)?$")
_INLINE_TASKS = re.compile(r"^\s*tasks\s*=")
_TOML_AT_LINE = re.compile(r"\s*\(at line (\d+), column (\d+)\)")


class BoardError(ValueError):
    """The board cannot run as written; the message names the line or key to fix."""


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

    @property
    def where(self) -> str:
        return f":{self.line}" if self.line else f": task #{self.number}"


@dataclass
class ParsedBoard:
    """A board as written: its board-wide part (read already) and its rows, read as asked for."""

    source: str  # how messages name the board (its path)
    format: str  # "toml" or "markdown"
    head: BoardHead
    rows: Iterator[RawTask]
    path: str = ""  # the file it was read from ("" for text, or a board built in code)
    whole: bool = False  # checked whole, every row valid: it goes inline in the run's input


def parse_board_file(path: str | Path, whole: bool = False) -> ParsedBoard:
    """A `.toml` or markdown board file, its rows read from the file as they are asked for;
    BoardError when it cannot be read or its board-wide part is malformed."""
    return _parsed(_file_lines(str(path)), str(path), "", str(path), whole)


def parse_board_text(text: str, source: str, fmt: str = "", whole: bool = False) -> ParsedBoard:
    """A board given as text (the planner's answer, say); by default the format by `source`."""
    return _parsed(iter(text.splitlines(keepends=True)), source, fmt, "", whole)


def scan_specs(board: Board) -> ParsedBoard:
    """A board built in code (or parsed already): its tasks are rows with every field set."""
    settings = {key: getattr(board, key) for key in BOARD_FIELDS}
    head = BoardHead(format=board.format, name=board.name, settings=settings, rows=ROWS_SPECS)
    rows = (RawTask(number=n, line=0, row=asdict(t), id=t.id) for n, t in enumerate(board.tasks, 1))
    return ParsedBoard(board.path or board.name, board.format, head, rows, path=board.path)


def _parsed(lines: Iterable[str], source: str, fmt: str, path: str, whole: bool) -> ParsedBoard:
    fmt = fmt or ("toml" if source.endswith(".toml") else "markdown")
    items = _scan_markdown(lines, source) if fmt == "markdown" else _scan_toml(lines, source)
    head = next(items)
    assert isinstance(head, BoardHead)
    return ParsedBoard(source, fmt, head, items, path, whole)  # type: ignore[arg-type]


def _file_lines(path: str) -> Iterator[str]:
    """The file's lines, kept open only while they are read; a read error as a BoardError."""
    try:
        with open(path, encoding="utf-8") as lines:
            yield from lines
    except OSError as err:
        raise BoardError(f"cannot read board {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise BoardError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None


def _multiline_state(line: str, state: str | None) -> str | None:
    """Whether a line ends inside a TOML multi-line string, given where it began: enough to find
    table headers (a `[[tasks]]` inside such a string is text)."""
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


def _scan_toml(lines: Iterable[str], source: str) -> Iterator[BoardHead | RawTask]:
    """The `BoardHead` (settings as written), then a `RawTask` per task."""
    head_lines: list[str] = []
    chunk: list[str] | None = None
    chunk_line = number = 0
    state: str | None = None
    for lineno, line in enumerate(lines, 1):
        at_start = state
        state = _multiline_state(line, state)
        if at_start is None and _TASKS_HEADER.match(line):
            if chunk is None:
                head, inline = _toml_head(head_lines, source)
                if inline:
                    raise BoardError(f"{source}:{lineno}: tasks are given both as `tasks = [...]` "
                                     "and as [[tasks]]")
                yield head
            else:
                number += 1
                yield _toml_task(chunk, chunk_line, number, source)
            chunk, chunk_line = [line], lineno
            continue
        (head_lines if chunk is None else chunk).append(line)
    if chunk is not None:
        yield _toml_task(chunk, chunk_line, number + 1, source)
        return
    head, inline = _toml_head(head_lines, source)  # no [[tasks]]: maybe `tasks = [{...}, ...]`
    if not inline:
        raise BoardError(f"{source}: no [[tasks]] tables")
    yield head
    where = next((n for n, text in enumerate(head_lines, 1) if _INLINE_TASKS.match(text)), 0)
    for number, row in enumerate(inline, 1):
        yield _checked_row(row, number, where, source)


def _toml_head(lines: list[str], source: str) -> tuple[BoardHead, list[Any]]:
    try:
        data = tomllib.loads("".join(lines))
    except tomllib.TOMLDecodeError as err:
        raise BoardError(f"{source}: not valid TOML: {err}") from None
    unknown = sorted(set(data) - BOARD_KEYS)
    if unknown:
        raise BoardError(f"{source}: unknown board key(s) {', '.join(unknown)}; "
                         f"allowed: {', '.join(sorted(BOARD_KEYS))}")
    inline = data.pop("tasks", None)
    if inline is not None and (not isinstance(inline, list) or not inline):
        raise BoardError(f"{source}: `tasks` must be a list of tables")
    problem = _json_problem(data)
    if problem:
        raise BoardError(f"{source}: {problem}")
    name = str(data.get("name") or Path(source).stem)
    return BoardHead(format="toml", name=name, settings=data), inline or []


def _toml_task(chunk: list[str], first_line: int, number: int, source: str) -> RawTask:
    try:
        data = tomllib.loads("".join(chunk))
    except tomllib.TOMLDecodeError as err:
        at = _TOML_AT_LINE.search(str(err))
        line = first_line + int(at.group(1)) - 1 if at else first_line
        reason = _TOML_AT_LINE.sub("", str(err))
        return RawTask(number=number, line=first_line, id=_guess_id(chunk),
                       error=f"{source}:{line}: not valid TOML: {reason}")
    extra = sorted(set(data) - {"tasks"})
    if extra:
        return RawTask(number=number, line=first_line, id=_guess_id(chunk), error=(
            f"{source}:{first_line}: table(s) {', '.join(extra)} after [[tasks]]: board-wide keys "
            "go before the first [[tasks]]"))
    return _checked_row(data["tasks"][0], number, first_line, source)


def _checked_row(row: Any, number: int, line: int, source: str) -> RawTask:
    if not isinstance(row, dict):
        return RawTask(number=number, line=line,
                       error=f"{source}:{line}: [[tasks]] #{number} must be a table")
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
    if isinstance(value, (dict, list)):
        items = value.items() if isinstance(value, dict) else ((key, v) for v in value)
        return next((p for p in (_json_problem(v, k) for k, v in items) if p), "")
    if not isinstance(value, (str, int, float, bool)) and value is not None:
        return f"'{key}': a {type(value).__name__} is not a board value"
    return ""


def _cells(line: str) -> list[str]:
    stripped = line.strip()
    if not stripped.startswith("|"):
        return []
    return [c.strip() for c in stripped.strip("|").split("|")]


def _header(cells: list[str]) -> list[str]:
    """The columns, when `cells` are the header of a task table."""
    columns = [c.lower() for c in cells]
    return columns if set(columns) >= set(MARKDOWN_COLUMNS) else []


def _scan_markdown(lines: Iterable[str], source: str) -> Iterator[BoardHead | RawTask]:
    """The `BoardHead` (a markdown board has no settings of its own), then a `RawTask` per row."""
    columns: list[str] = []
    number = 0
    for lineno, line in enumerate(lines, 1):
        cells = _cells(line)
        if not columns:
            columns = _header(cells)
            if columns:
                yield BoardHead(format="markdown", name=Path(source).stem, rows=ROWS_SPECS)
            continue
        if not cells:
            if line.strip():
                break  # the table ended
            continue
        if all(set(c) <= set("-: ") for c in cells):
            continue  # the |---|---| separator
        number += 1
        yield _markdown_task(cells, columns, number, lineno, source)
    if not columns:
        raise BoardError(f"{source}: no task table found; it needs the columns "
                         f"{' | '.join(c.title() for c in MARKDOWN_COLUMNS)}")


def _markdown_task(cells: list[str], columns: list[str], number: int, line: int,
                   source: str) -> RawTask:
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


def render_markdown_status(text: str, landed: set[str]) -> str:
    """The board's text with `[x]` for every landed task (rows otherwise untouched)."""
    out = []
    columns: list[str] = []
    for line in text.splitlines(keepends=True):
        cells = _cells(line)
        if _header(cells):
            columns = _header(cells)
        elif columns and len(cells) == len(columns):
            row = dict(zip(columns, cells))
            if row["id"] in landed and row["status"].strip() in ("[ ]", "[]"):
                line = line.replace(row["status"], "[x]", 1)
        out.append(line)
    return "".join(out)
