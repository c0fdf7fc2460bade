"""Stage 1 of reading a board (parse -> check -> store -> start): a board file as written.

`parse_board_file` reads the board-wide part (a problem there refuses the board) and hands on the
rows as a stream, one raw row per task with the line it starts on or the reason it cannot be read:
no reader holds a board of any size whole. Nothing here applies the CLI's overrides or the board's
rules; that is the check stage's (`taskfleet.core.board_check`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taskfleet.core.board_rows import ROWS_SPECS, BoardHead, RawTask
from taskfleet.core.boards import MARKDOWN_COLUMNS, BoardError, _cells, toml_board_table

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

_TASKS_HEADER = re.compile(r"^\s*\[\[\s*tasks\s*\]\]\s*(#.*)?$")
_INLINE_TASKS = re.compile(r"^\s*tasks\s*=")
_TOML_AT_LINE = re.compile(r"\s*\(at line (\d+), column (\d+)\)")


@dataclass
class ParsedBoard:
    """A board as written: its board-wide part (read already) and its rows, read as they are asked for.

    `text` is set instead of rows for a board that is to be checked whole (`whole=True`): one that
    goes inline in the run's input, where a bad row refuses the board.
    """

    source: str  # how messages name the board (its path)
    format: str  # "toml" or "markdown"
    head: BoardHead | None = None
    rows: Iterator[RawTask] = field(default_factory=lambda: iter(()))
    text: str | None = None


def board_format(path: str | Path) -> str:
    return "toml" if str(path).endswith(".toml") else "markdown"


def parse_board_file(path: str | Path, whole: bool = False) -> ParsedBoard:
    """A `.toml` or markdown board file; BoardError when it cannot be read or its board-wide part
    is malformed. Its rows are read from the file as they are asked for."""
    source, fmt = str(path), board_format(path)
    if whole:
        try:
            text = Path(path).read_text()
        except OSError as err:
            raise BoardError(f"cannot read board {path}: {err.strerror}") from None
        return ParsedBoard(source=source, format=fmt, text=text)
    return _parsed(_file_lines(source), source, fmt)


def parse_board_text(text: str, source: str) -> ParsedBoard:
    """A board given as text (the planner's answer, say); the format by `source`'s suffix."""
    return _parsed(iter(text.splitlines(keepends=True)), source, board_format(source))


def _parsed(lines: Iterable[str], source: str, fmt: str) -> ParsedBoard:
    items = _scan_markdown(lines, source) if fmt == "markdown" else _scan_toml(lines, source)
    head = next(items)
    assert isinstance(head, BoardHead)
    return ParsedBoard(source=source, format=fmt, head=head, rows=items)  # type: ignore[arg-type]


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


def _scan_toml(lines: Iterable[str], source: str) -> Iterator[BoardHead | RawTask]:
    """The `BoardHead` (settings as written), then a `RawTask` per task."""
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
                head, inline = _toml_head(head_lines, source)
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
        head, inline = _toml_head(head_lines, source)
        if not inline:
            raise BoardError(f"{source}: no [[tasks]] tables")
        yield head
        where = next((n for n, text in enumerate(head_lines, 1) if _INLINE_TASKS.match(text)), 0)
        for number, row in enumerate(inline, 1):
            yield _checked_row(row, number, where, source)
        return
    number += 1
    yield _toml_task(chunk, chunk_line, number, source)


def _toml_head(lines: list[str], source: str) -> tuple[BoardHead, list[Any]]:
    data = toml_board_table("".join(lines), source)
    inline = data.pop("tasks", None)
    if inline is not None and (not isinstance(inline, list) or not inline):
        raise BoardError(f"{source}: `tasks` must be a list of tables")
    problem = _json_problem(data)
    if problem:
        raise BoardError(f"{source}: {problem}")
    head = BoardHead(format="toml", name=str(data.get("name") or Path(source).stem), settings=data)
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


def _scan_markdown(lines: Iterable[str], source: str) -> Iterator[BoardHead | RawTask]:
    """The `BoardHead` (a markdown board has no settings of its own), then a `RawTask` per row."""
    head = BoardHead(format="markdown", name=Path(source).stem, settings={}, rows=ROWS_SPECS)
    columns: list[str] = []
    number = 0
    for lineno, line in enumerate(lines, 1):
        cells = _cells(line)
        if not columns:
            if cells and {c.lower() for c in cells} >= set(MARKDOWN_COLUMNS):
                columns = [c.lower() for c in cells]
                yield head
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
