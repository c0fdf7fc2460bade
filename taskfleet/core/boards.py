"""Boards: the markdown table of `tasks/board-*.md` files, or TOML for richer ones.

Parsing is all-or-nothing: a bad board is refused with one error naming its line or key, and
nothing starts.
"""

from __future__ import annotations

import re
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from taskfleet.core.git_op_validation import branch_name_problem
from taskfleet.core.judge_board_keys import JUDGE_KEYS, judge_fields_problem
from taskfleet.core.llm_board_keys import ANTHROPIC, LLM_KEYS, llm_fields_problem
from taskfleet.core.merge_queue_validation import queue_board_problem
from taskfleet.core.models.orchestrator import Board, TaskSpec
from taskfleet.core.task_env import env_names_problem

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

MARKDOWN_COLUMNS = ("id", "scope", "status", "branch", "verification")
QUEUE_KEYS = ("queue_verify", "queue_target", "queue_max_batch", "queue_max_wait_seconds",
              "queue_retries", "queue_parallel", "queue_flake_retries")
LANDINGS = ("push", "merge", "queue")
BOARD_KEYS = {"name", "base", "max_parallel", "land", "run", "verify", "template", "task_type",
              "activity_type", "timeout_seconds", "refresh", "worktree", "env", "tasks", *QUEUE_KEYS} \
    | set(LLM_KEYS) | set(JUDGE_KEYS)
TASK_KEYS = {f.name for f in fields(TaskSpec)} - {"acceptance"}
_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class BoardError(ValueError):
    """The board cannot run as written; the message names the line or key to fix."""


def load_board(path: Path | str, **overrides: Any) -> Board:
    """Parse a `.md` or `.toml` board; `overrides` are the CLI's board-wide settings (--run, ...)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise BoardError(f"cannot read board {path}: {err.strerror}") from None
    if path.suffix == ".toml":
        board = parse_toml_board(text, source=str(path), **overrides)
    else:
        board = parse_markdown_board(text, source=str(path), **overrides)
    board.path = str(path)
    return board


def _defaults(overrides: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in overrides.items() if v not in (None, "")}


def parse_markdown_board(text: str, source: str = "board.md", **overrides: Any) -> Board:
    """The table with columns ID | Scope | Status | Branch | Verification; status `[ ]` or `[x]`."""
    lines = text.splitlines()
    header_at = None
    columns: list[str] = []
    for number, line in enumerate(lines, 1):
        cells = _cells(line)
        if cells and {c.lower() for c in cells} >= set(MARKDOWN_COLUMNS):
            header_at, columns = number, [c.lower() for c in cells]
            break
    if header_at is None:
        raise BoardError(
            f"{source}: no task table found; it needs the columns {' | '.join(c.title() for c in MARKDOWN_COLUMNS)}"
        )
    settings = _defaults(overrides)
    tasks: list[TaskSpec] = []
    for number in range(header_at + 1, len(lines) + 1):
        line = lines[number - 1]
        cells = _cells(line)
        if not cells:
            if line.strip():
                break  # the table ended
            continue
        if all(set(c) <= set("-: ") for c in cells):
            continue  # the |---|---| separator
        if len(cells) != len(columns):
            raise BoardError(f"{source}:{number}: expected {len(columns)} cells, found {len(cells)}")
        row = dict(zip(columns, cells))
        status = row["status"].strip().lower()
        if status not in ("[ ]", "[x]", "[]"):
            raise BoardError(f"{source}:{number}: status must be [ ] or [x], got {row['status']!r}")
        verification = row["verification"].strip()
        command = verification[1:-1] if re.fullmatch(r"`[^`]+`", verification) else ""
        spec = TaskSpec(
            id=row["id"].strip(),
            scope=row["scope"].strip(),
            branch=row["branch"].strip().strip("`").strip(),
            verify=command,
            acceptance="" if command else verification,
            done=status == "[x]",
        )
        explicit = {"id", "scope", "branch", "done"} | ({"verify"} if command else set())
        tasks.append(_with_defaults(spec, settings, explicit, f"{source}:{number}"))
    return validate_board(Board(tasks=tasks, name=Path(source).stem, format="markdown", **board_wide(settings)), source)


def toml_board_table(text: str, source: str) -> dict[str, Any]:
    """A TOML board's top-level table, refused with one line when it is not TOML or names a key no
    board has: the whole-board reader and the streaming one (`board_parse.py`) share it."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise BoardError(f"{source}: not valid TOML: {err}") from None
    unknown = sorted(set(data) - BOARD_KEYS)
    if unknown:
        raise BoardError(f"{source}: unknown board key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(BOARD_KEYS))}")
    return data


def parse_toml_board(text: str, source: str = "board.toml", **overrides: Any) -> Board:
    data = toml_board_table(text, source)
    rows = data.pop("tasks", None)
    if not isinstance(rows, list) or not rows:
        raise BoardError(f"{source}: no [[tasks]] tables")
    settings = {**data, **_defaults(overrides)}
    tasks = []
    for number, row in enumerate(rows, 1):
        where = f"{source}: [[tasks]] #{number}" + (f" ({row.get('id')})" if isinstance(row, dict) and row.get("id") else "")
        if not isinstance(row, dict):
            raise BoardError(f"{where}: must be a table")
        tasks.append(spec_from_row(row, TASK_KEYS, settings, where))
    name = str(settings.get("name") or Path(source).stem)
    return validate_board(Board(tasks=tasks, name=name, format="toml", **board_wide(settings)), source)


def _cells(line: str) -> list[str]:
    stripped = line.strip()
    if not stripped.startswith("|"):
        return []
    return [c.strip() for c in stripped.strip("|").split("|")]


def board_wide(settings: dict[str, Any]) -> dict[str, Any]:
    """The board-wide fields of `Board` from a board's settings (file keys and CLI overrides)."""
    out = {k: settings[k] for k in ("base", "max_parallel", "land", *QUEUE_KEYS) if k in settings}
    if "queue_verify" not in out and isinstance(settings.get("verify"), str):
        out["queue_verify"] = settings["verify"]  # the merged result is checked as the board checks a task
    return out


DEFAULTABLE = ("run", "verify", "template", "task_type", "activity_type", "timeout_seconds", "refresh", "worktree",
               "env", *LLM_KEYS, *JUDGE_KEYS)


def spec_from_row(row: dict[str, Any], allowed: set[str] | frozenset[str], settings: dict[str, Any],
                  where: str) -> TaskSpec:
    """A task row (only `allowed` keys) as a TaskSpec with the board's defaults; BoardError naming `where`."""
    unknown = sorted(set(row) - allowed)
    if unknown:
        raise BoardError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    try:
        spec = TaskSpec(**{"id": "", **row})
    except TypeError as err:
        raise BoardError(f"{where}: {err}") from None
    return _with_defaults(spec, settings, set(row), where)


def _with_defaults(spec: TaskSpec, settings: dict[str, Any], explicit: set[str], where: str) -> TaskSpec:
    """Board-wide settings fill every task field the task itself did not set."""
    if spec.implementer == ANTHROPIC and "implementer" in explicit and "run" not in explicit:
        settings = {k: v for k, v in settings.items() if k != "run"}  # the task's own choice wins
    # A task that picks its own kind of judge drops the board's other kind.
    if "judge_run" in explicit and "judge" not in explicit:
        settings = {k: v for k, v in settings.items() if k != "judge"}
    if "judge" in explicit and "judge_run" not in explicit:
        settings = {k: v for k, v in settings.items() if k != "judge_run"}
    spec = replace(spec, **{k: settings[k] for k in DEFAULTABLE if k in settings and k not in explicit})
    if not spec.branch:
        spec.branch = f"task/{spec.id}"
    for name in ("id", "scope", "branch", "run", "verify", "template", "task_type", "activity_type"):
        if not isinstance(getattr(spec, name), str):
            raise BoardError(f"{where}: '{name}' must be a string")
    for name in ("refresh", "worktree", "done"):
        if not isinstance(getattr(spec, name), bool):
            raise BoardError(f"{where}: '{name}' must be true or false")
    if not isinstance(spec.timeout_seconds, (int, float)) or spec.timeout_seconds <= 0:
        raise BoardError(f"{where}: timeout_seconds must be a number > 0")
    problem = env_names_problem(spec.env)
    if problem:
        raise BoardError(f"{where}: {problem}")
    problem = llm_fields_problem(spec) or judge_fields_problem(spec)
    if problem:
        raise BoardError(f"{where}: {problem}")
    return spec


def validate_board(board: Board, source: str = "board") -> Board:
    """Refuse a board that cannot run as written (also used by the workflow on its input)."""
    if not board.tasks:
        raise BoardError(f"{source}: the board has no tasks")
    if board.land not in LANDINGS:
        raise BoardError(f"{source}: land must be 'push', 'merge' or 'queue', got {board.land!r}")
    if not isinstance(board.max_parallel, int) or board.max_parallel < 1:
        raise BoardError(f"{source}: max_parallel must be a whole number >= 1")
    if not isinstance(board.base, str):
        raise BoardError(f"{source}: base must be a branch name")
    problem = branch_name_problem(board.base) if board.base else None  # "": the remote's default branch
    if problem:
        raise BoardError(f"{source}: base: {problem}")
    problem = queue_board_problem(board)
    if problem:
        raise BoardError(f"{source}: {problem}")
    seen: dict[str, str] = {}
    branches: dict[str, str] = {}
    for task in board.tasks:
        if not _TASK_ID.match(task.id):
            raise BoardError(f"{source}: task id {task.id!r} must start with a letter or digit, then letters, "
                             "digits, '.', '_' or '-' (at most 64 in all)")
        if task.id in seen:
            raise BoardError(f"{source}: duplicate task id {task.id}")
        seen[task.id] = task.id
        problem = branch_name_problem(task.branch)
        if problem:
            raise BoardError(f"{source}: task {task.id}: {problem}")
        if task.branch in branches:
            raise BoardError(f"{source}: tasks {branches[task.branch]} and {task.id} share branch {task.branch}")
        if task.branch in (board.base, board.queue_target):
            raise BoardError(f"{source}: task {task.id} works on the branch it lands on, {task.branch}")
        branches[task.branch] = task.id
        problem = llm_fields_problem(task) or judge_fields_problem(task) or env_names_problem(task.env)
        if problem:
            raise BoardError(f"{source}: task {task.id}: {problem}")
        if not task.done:
            if task.implementer == ANTHROPIC:
                if not task.verify.strip():
                    raise BoardError(f"{source}: task {task.id} has no verify command (set `verify`, or --verify)")
                continue
            if not task.run.strip():
                raise BoardError(f"{source}: task {task.id} has no run command (set `run`, or --run)")
            if not task.verify.strip():
                raise BoardError(f"{source}: task {task.id} has no verify command (set `verify`, or --verify)")
    return board


def render_markdown_status(text: str, landed: set[str]) -> str:
    """The board's text with `[x]` for every landed task (rows otherwise untouched)."""
    out = []
    columns: list[str] = []
    for line in text.splitlines(keepends=True):
        cells = _cells(line)
        if cells and {c.lower() for c in cells} >= set(MARKDOWN_COLUMNS):
            columns = [c.lower() for c in cells]
        elif columns and len(cells) == len(columns):
            row = dict(zip(columns, cells))
            if row["id"] in landed and row["status"].strip() in ("[ ]", "[]"):
                line = line.replace(row["status"], "[x]", 1)
        out.append(line)
    return "".join(out)
