"""The planner's answer (`submit_board`'s input) as a TOML board, checked by the parser `taskfleet
run` uses, so what passes here runs unchanged. Pure, for `PlannerWorkflow`; a refused answer
comes back as every problem found, each naming its task (for the model's one fix round)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from taskfleet.core.board_toml import board_toml
from taskfleet.core.boards import (
    BoardError,
    check_board,
    parse_board_text,
    task_from_row,
    unique_ids,
)

# The keys the planner writes, in the order they are written (each a board key of the planner's).
TASK_KEYS = ("id", "scope", "run", "implementer", "verify", "context")
REQUIRED = ("id", "scope", "verify")
NAME_MAX_CHARS = 100
MAX_PROBLEMS = 20
SOURCE = "board.toml"
_WHERE = re.compile(r"^board\.toml(?::\d+| task #\d+)?:\s*")
_WHERE_LINE = re.compile(r"^board\.toml:(\d+):\s*")
_LINE = re.compile(r"\((?:first on )?line (\d+)\)")


class BoardRefused(ValueError):
    """The answer is not a board `taskfleet run` would accept; `problems` says why, one per line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class PlannedBoard:
    text: str  # the TOML board
    name: str
    task_ids: list[str]


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def answer_problems(answer: Any, max_tasks: int) -> list[str]:
    """What breaks `submit_board`'s schema, or the task limit (refused, never cut)."""
    if not isinstance(answer, dict):
        return ["submit_board's input must be an object with `name` and `tasks`"]
    problems = []
    unknown = sorted(str(k) for k in set(answer) - {"name", "tasks"})
    if unknown:
        problems.append(f"unknown key(s) {', '.join(unknown)[:100]}; submit_board takes `name` "
                        "and `tasks`")
    name = answer.get("name")
    if not _is_str(name) or not name.strip():
        problems.append("`name` must be a non-empty string")
    elif len(name) > NAME_MAX_CHARS:
        problems.append(f"`name` is {len(name)} characters; at most {NAME_MAX_CHARS}")
    tasks = answer.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        return problems + ["`tasks` must be a non-empty list of task objects"]
    if len(tasks) > max_tasks:
        problems.append(f"the board has {len(tasks)} tasks; at most {max_tasks} are allowed: merge "
                        "or drop tasks (a board over the limit is refused, never cut)")
    for i, task in enumerate(tasks):
        where = f"tasks[{i}]"
        if not isinstance(task, dict):
            problems.append(f"{where} must be an object")
            continue
        if _is_str(task.get("id")):
            where += f" ({task['id']})"
        extra = sorted(str(k) for k in set(task) - set(TASK_KEYS))
        if extra:
            problems.append(f"{where}: unknown key(s) {', '.join(extra)[:100]}; a task takes "
                            f"{', '.join(TASK_KEYS)}")
        for key in REQUIRED:
            if not _is_str(task.get(key)):
                problems.append(f"{where}: `{key}` must be a string")
        for key in ("run", "implementer"):
            if key in task and not _is_str(task[key]):
                problems.append(f"{where}: `{key}` must be a string")
        context = task.get("context", [])
        if not isinstance(context, list) or not all(_is_str(g) for g in context):
            problems.append(f"{where}: `context` must be a list of globs (strings)")
    return problems[:MAX_PROBLEMS]


def parser_problems(text: str) -> list[str]:
    """What the board parser refuses: each task as a run loads it, then ids and branches shared by
    two tasks; each problem names its task by its place (the model never saw line numbers)."""
    try:
        parsed = parse_board_text(text, SOURCE)
        head = check_board(parsed).head
        rows = list(parsed.rows)
    except BoardError as err:
        return [str(err)]
    names = {raw.line: f"tasks[{raw.number - 1}] ({raw.id or 'no id'})" for raw in rows}
    problems = []
    for raw in rows:
        try:
            task_from_row(raw, head, SOURCE)
        except BoardError as err:
            problems.append(f"{names[raw.line]}: {_WHERE.sub('', str(err))}")
    if problems:
        return problems[:MAX_PROBLEMS]
    try:
        list(unique_ids(rows, SOURCE))
    except BoardError as err:
        message = _WHERE_LINE.sub(lambda m: f"{names.get(int(m.group(1)), 'the board')}: ",
                                  str(err))
        return [_LINE.sub(lambda m: f"(and {names.get(int(m.group(1)), 'another task')})", message)]
    return []


def planned_board(answer: Any, base: str, goal: str, max_tasks: int) -> PlannedBoard:
    """The board as TOML text, or `BoardRefused` with every problem found."""
    problems = answer_problems(answer, max_tasks)
    if problems:
        raise BoardRefused(problems)
    rows = [{key: task[key] for key in TASK_KEYS if key in task} for task in answer["tasks"]]
    header = ["Planned by taskfleet (`taskfleet plan`) for the goal:",
              *goal.strip().splitlines()[:20], "",
              "Read it, change what you like, then: taskfleet run <this file> --repo <clone>"]
    text = board_toml({"name": answer["name"].strip(), "base": base}, rows, header)
    problems = parser_problems(text)
    if problems:
        raise BoardRefused(problems)
    return PlannedBoard(text=text, name=answer["name"].strip(),
                        task_ids=[row["id"] for row in rows])
