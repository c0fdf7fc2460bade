"""A board's rules: one row to a `TaskSpec` with the board's defaults, and what a task and a board
must be to run. Pure Python, so workflows run them on input a person may have typed by hand."""

from __future__ import annotations

import posixpath
import re
from dataclasses import fields, replace
from typing import Any

from taskfleet.core.boards.keys import BOARD_FIELDS, DEFAULTABLE, TASK_KEYS
from taskfleet.core.boards.read import ROWS_TOML, BoardError, BoardHead, RawTask
from taskfleet.core.git_op_validation import branch_name_problem
from taskfleet.core.merge_queue_validation import queue_board_problem
from taskfleet.core.models.orchestrator import Board, TaskSpec
from taskfleet.core.task_env import env_names_problem

ANTHROPIC = "anthropic"  # the built-in Claude implementer, and the Claude judge
IMPLEMENTERS = ("", "command", ANTHROPIC)
LANDINGS = ("push", "merge", "queue")
SPEC_KEYS = frozenset(f.name for f in fields(TaskSpec))  # rows of markdown boards and of code
_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_STRINGS = ("id", "scope", "branch", "run", "verify", "template", "task_type", "activity_type")
_FLAGS = ("refresh", "worktree", "done")


def board_wide(settings: dict[str, Any]) -> dict[str, Any]:
    """The board-wide fields of `Board` from a board's settings (file keys and CLI overrides)."""
    out = {k: settings[k] for k in BOARD_FIELDS if k in settings}
    if "queue_verify" not in out and isinstance(settings.get("verify"), str):
        out["queue_verify"] = settings["verify"]  # the merged result is checked as a task is
    return out


def task_from_row(raw: RawTask, head: BoardHead, source: str) -> TaskSpec:
    """The task a row describes, with the board's defaults applied; BoardError naming its line."""
    if raw.error:
        raise BoardError(raw.error)
    where = f"{source}{raw.where}"
    allowed = TASK_KEYS if head.rows == ROWS_TOML else SPEC_KEYS
    spec = spec_from_row(raw.row or {}, allowed, head.settings, where)
    settings = head.settings
    problem = task_problem(spec, settings.get("base", ""), settings.get("queue_target", ""))
    if problem:
        raise BoardError(f"{where}: {problem}")
    return spec


def spec_from_row(row: dict[str, Any], allowed: frozenset[str], settings: dict[str, Any],
                  where: str) -> TaskSpec:
    """A task row (only `allowed` keys) as a checked TaskSpec with the board's defaults."""
    unknown = sorted(set(row) - allowed)
    if unknown:
        raise BoardError(f"{where}: unknown key(s) {', '.join(unknown)}; "
                         f"allowed: {', '.join(sorted(allowed))}")
    try:
        spec = TaskSpec(**{"id": "", **row})
    except TypeError as err:
        raise BoardError(f"{where}: {err}") from None
    explicit = set(row)
    if spec.implementer == ANTHROPIC and "implementer" in explicit and "run" not in explicit:
        settings = {k: v for k, v in settings.items() if k != "run"}  # the task's own choice wins
    # A task that picks its own kind of judge drops the board's other kind.
    for mine, other in (("judge_run", "judge"), ("judge", "judge_run")):
        if mine in explicit and other not in explicit:
            settings = {k: v for k, v in settings.items() if k != other}
    spec = replace(spec, **{k: settings[k] for k in DEFAULTABLE
                            if k in settings and k not in explicit})
    if not spec.branch:
        spec.branch = f"task/{spec.id}"
    for name in _STRINGS:
        if not isinstance(getattr(spec, name), str):
            raise BoardError(f"{where}: '{name}' must be a string")
    for name in _FLAGS:
        if not isinstance(getattr(spec, name), bool):
            raise BoardError(f"{where}: '{name}' must be true or false")
    if not isinstance(spec.timeout_seconds, (int, float)) or spec.timeout_seconds <= 0:
        raise BoardError(f"{where}: timeout_seconds must be a number > 0")
    problem = fields_problem(spec)
    if problem:
        raise BoardError(f"{where}: {problem}")
    return spec


def task_problem(task: TaskSpec, base: str, target: str) -> str:
    """What keeps a task from running on a board landing on `base` (or queue `target`), or ""."""
    if not isinstance(task.id, str) or not _TASK_ID.match(task.id):
        return (f"task id {task.id!r} must start with a letter or digit, then letters, digits, "
                "'.', '_' or '-' (at most 64 in all)")
    problem = branch_name_problem(task.branch)
    if problem:
        return f"task {task.id}: {problem}"
    if task.branch in (base, target):
        return f"task {task.id} works on the branch it lands on, {task.branch}"
    if task.done:
        return ""
    if task.implementer != ANTHROPIC and not task.run.strip():
        return f"task {task.id} has no run command (set `run`, or --run)"
    if not task.verify.strip():
        return f"task {task.id} has no verify command (set `verify`, or --verify)"
    return ""


def validate_board(board: Board, source: str = "board") -> Board:
    """The workflow's check of its input: refuse a board that cannot run as written."""
    if not board.tasks:
        raise BoardError(f"{source}: the board has no tasks")
    check_board_settings(board, source)
    ids: set[str] = set()
    branches: dict[str, str] = {}
    for task in board.tasks:
        wrong = fields_problem(task)
        problem = f"task {task.id}: {wrong}" if wrong else task_problem(task, board.base,
                                                                           board.queue_target)
        if problem:
            raise BoardError(f"{source}: {problem}")
        if task.id in ids:
            raise BoardError(f"{source}: duplicate task id {task.id}")
        if task.branch in branches:
            raise BoardError(f"{source}: tasks {branches[task.branch]} and {task.id} share branch "
                             f"{task.branch}")
        ids.add(task.id)
        branches[task.branch] = task.id
    return board


def check_board_settings(board: Board, source: str) -> None:
    """The board-wide rules (land, max_parallel, base, queue keys); BoardError naming the key."""
    if board.land not in LANDINGS:
        raise BoardError(f"{source}: land must be 'push', 'merge' or 'queue', got {board.land!r}")
    if not isinstance(board.max_parallel, int) or board.max_parallel < 1:
        raise BoardError(f"{source}: max_parallel must be a whole number >= 1")
    if not isinstance(board.base, str):
        raise BoardError(f"{source}: base must be a branch name")
    problem = branch_name_problem(board.base) if board.base else None  # "": the remote's default
    if problem:
        raise BoardError(f"{source}: base: {problem}")
    problem = queue_board_problem(board)
    if problem:
        raise BoardError(f"{source}: {problem}")


def fields_problem(spec: TaskSpec) -> str:
    """What is wrong with a task's `env`, Claude implementer or judge fields, or ""."""
    return env_names_problem(spec.env) or llm_fields_problem(spec) or judge_fields_problem(spec)


def _whole(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def llm_fields_problem(spec: TaskSpec) -> str:
    """What is wrong with a task's Claude implementer fields, or "" (naming the key)."""
    if spec.implementer not in IMPLEMENTERS:
        return (f"implementer must be 'anthropic' (or unset for a `run` command), "
                f"got {spec.implementer!r}")
    if spec.implementer == ANTHROPIC and spec.run.strip():
        return "sets both implementer = 'anthropic' and run; choose one"
    if spec.implementer == ANTHROPIC and not spec.worktree:
        return "implementer = 'anthropic' needs worktree = true (its edits are committed)"
    if not isinstance(spec.model, str) or len(spec.model) > 200:
        return "model must be a model id string"
    if not _whole(spec.max_tokens, 1, 1_000_000):
        return "max_tokens must be a whole number >= 1"
    if not isinstance(spec.context, list) or not all(isinstance(g, str) and g.strip()
                                                     for g in spec.context):
        return "context must be a list of repo-relative globs (strings)"
    for glob in spec.context:
        if posixpath.isabs(glob) or ".." in glob.split("/"):
            return f"context glob {glob!r} must be repo-relative, without '..'"
    if not _whole(spec.max_attempts, 1, 20):
        return "max_attempts must be a whole number 1..20"
    if not isinstance(spec.llm_batch, bool):
        return "llm_batch must be true or false"
    if not _whole(spec.llm_batch_max_size, 1, 100_000):
        return "llm_batch_max_size must be a whole number 1..100000"
    age = spec.llm_batch_max_age_seconds
    if not isinstance(age, (int, float)) or isinstance(age, bool) or not 0 <= age <= 86_400:
        return "llm_batch_max_age_seconds must be a number 0..86400"
    return ""


def has_judge(spec: Any) -> bool:
    return bool(spec.judge or spec.judge_run.strip())


def judge_fields_problem(spec: TaskSpec) -> str:
    """A task's judge fields' problem, or "": `judge = "anthropic"` or `judge_run`, never both."""
    if not isinstance(spec.judge, str) or spec.judge not in ("", ANTHROPIC):
        return f"judge must be 'anthropic' (or use judge_run = COMMAND), got {spec.judge!r}"
    if not isinstance(spec.judge_run, str):
        return "judge_run must be a command line (a string)"
    if spec.judge and spec.judge_run.strip():
        return "sets both judge = 'anthropic' and judge_run; choose one"
    if not isinstance(spec.judge_model, str) or len(spec.judge_model) > 200:
        return "judge_model must be a model id string"
    if not isinstance(spec.judge_template, str) or not spec.judge_template.strip():
        return "judge_template must be a template name (or template text)"
    if not _whole(spec.judge_max_tokens, 1, 1_000_000):
        return "judge_max_tokens must be a whole number >= 1"
    if has_judge(spec) and spec.worktree is False:
        return "a judge needs worktree = true (it reviews the task's commit)"
    return ""
