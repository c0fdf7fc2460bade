"""The planner's answer as a board: TOML written so the parser reads back exactly what was meant,
schema and parser problems named by task, the task limit refused (never cut), the input checked."""

from __future__ import annotations

import sys

import pytest

from taskfleet.core.board_toml import board_toml, toml_string
from taskfleet.core.boards import parse_toml_board
from taskfleet.core.plan_board import BoardRefused, planned_board
from taskfleet.core.plan_input import InvalidPlanInput, parse_plan_input

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

NASTY = ['say "hi" \\ now', "tab\there", "two\nlines\r\n", "bell\x07 del\x7f nul\x00",
         "ünïcode ✓", "'''", '"""']


@pytest.mark.parametrize("text", NASTY)
def test_strings_round_trip_through_toml(text: str) -> None:
    assert tomllib.loads(f"x = {toml_string(text)}\n")["x"] == text


def test_a_written_board_parses_to_the_same_tasks() -> None:
    rows = [{"id": "A", "scope": NASTY[0], "run": "printf '%s\\n' \"$X\" > a",
             "verify": "test -s a"},
            {"id": "B", "scope": "b", "implementer": "anthropic", "verify": "true",
             "context": ["src/*.py"]}]
    text = board_toml({"name": "n", "base": "main"}, rows,
                      header=["a goal\x1b with an escape", "line two"])
    board = parse_toml_board(text)
    assert [(t.id, t.scope, t.run, t.implementer, t.context) for t in board.tasks] == [
        ("A", NASTY[0], rows[0]["run"], "", []), ("B", "b", "", "anthropic", ["src/*.py"])]


def good(n: int = 2) -> dict:
    return {"name": "b", "tasks": [{"id": f"T{i}", "scope": "s", "run": "true", "verify": "true"}
                                   for i in range(n)]}


@pytest.mark.parametrize("answer, words", [
    ("a string", "must be an object"),
    ({"tasks": good()["tasks"]}, "`name` must be a non-empty string"),
    ({"name": "b", "tasks": []}, "`tasks` must be a non-empty list"),
    ({"name": "b", "tasks": ["x"]}, "tasks[0] must be an object"),
    ({"name": "b", "tasks": [{"id": "A", "scope": "s"}]},
     "tasks[0] (A): `verify` must be a string"),
    ({"name": "b", "tasks": [{"id": "A", "scope": "s", "verify": "v", "run": 3}]},
     "`run` must be a string"),
    ({"name": "b", "tasks": [{"id": "A", "scope": "s", "verify": "v", "context": "x"}]},
     "`context` must be a list"),
    ({"name": "b", "tasks": [{"id": "A", "scope": "s", "verify": "v", "branch": "x"}]},
     "unknown key(s) branch"),
    ({**good(), "extra": 1}, "unknown key(s) extra"),
    ({"name": "b", "tasks": [{"id": "A", "scope": "s", "verify": "v"}]},
     "tasks[0] (A): task A has no run command"),
    ({"name": "b", "tasks": [{"id": "a b", "scope": "s", "verify": "v", "run": "r"}]},
     "tasks[0] (a b): "),
    ({"name": "b", "tasks": [{"id": "A", "scope": "s", "verify": "v", "run": "r",
                              "implementer": "openai"}]},
     "implementer must be"),
])
def test_bad_answers_are_refused_naming_the_task(answer: object, words: str) -> None:
    with pytest.raises(BoardRefused) as refused:
        planned_board(answer, "main", "goal", 10)
    assert any(words in p for p in refused.value.problems), refused.value.problems


def test_over_the_limit_is_refused_never_cut() -> None:
    with pytest.raises(BoardRefused, match="the board has 3 tasks; at most 2 are allowed"):
        planned_board(good(3), "main", "goal", 2)
    assert planned_board(good(2), "main", "goal", 2).task_ids == ["T0", "T1"]


def test_every_problem_is_reported_at_once() -> None:
    answer = {"name": "b", "tasks": [{"id": "A", "scope": "s", "verify": "v"},
                                     {"id": "B", "scope": "s", "verify": "v"}]}
    with pytest.raises(BoardRefused) as refused:
        planned_board(answer, "main", "goal", 5)
    assert len(refused.value.problems) == 2


@pytest.mark.parametrize("raw, words", [
    (None, "must be a JSON object"),
    ({"goal": "", "repo": "/r"}, "goal must be"),
    ({"goal": "g", "repo": "r"}, "absolute path"),
    ({"goal": "g", "repo": "/r", "base": "-x"}, "base:"),
    ({"goal": "g", "repo": "/r", "max_tasks": 0}, "max_tasks"),
    ({"goal": "g", "repo": "/r", "max_tasks": True}, "max_tasks"),
    ({"goal": "g", "repo": "/r", "context": ["../x"]}, "repo-relative"),
    ({"goal": "g", "repo": "/r", "llm_batch": "yes"}, "llm_batch"),
    ({"goal": "g", "repo": "/r", "remote": "a b"}, "remote"),
    ({"goal": "g", "repo": "/r", "colour": 1}, "unknown key(s) colour"),
])
def test_plan_input_is_checked_naming_the_key(raw: object, words: str) -> None:
    with pytest.raises(InvalidPlanInput, match=words.replace("(", r"\(").replace(")", r"\)")):
        parse_plan_input(raw)


def test_plan_input_defaults() -> None:
    plan = parse_plan_input({"goal": "g", "repo": "/r"})
    assert (plan.base, plan.max_tasks, plan.llm_batch, plan.template) == (
        "main", 20, False, "planner.j2")
