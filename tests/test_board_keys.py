"""The registry of board keys is what the parser accepts, what `Board` and `TaskSpec` hold, and
what the docs' table shows: one list, so none of them can drift from the others."""

from __future__ import annotations

import re
from dataclasses import fields

import pytest

from taskfleet.core.boards import KEYS, BoardError, keys_table, parse_toml_board
from taskfleet.core.boards.keys import BOARD, BOTH, PLANNER, TASK
from taskfleet.core.models.orchestrator import Board, TaskSpec
from taskfleet.core.plan_board import TASK_KEYS as PLANNER_WRITES

SCOPES = {key.name: key.scope for key in KEYS}


def allowed_in(message: str) -> set[str]:
    return set(re.search(r"allowed: (.*)$", message).group(1).split(", "))


def test_the_parser_accepts_exactly_the_registry_s_keys():
    with pytest.raises(BoardError) as board_wide:
        parse_toml_board('colour = "red"\n[[tasks]]\nid = "A"\n')
    board_keys = {k for k, s in SCOPES.items() if s != TASK}
    assert allowed_in(str(board_wide.value)) == board_keys | {"tasks"}
    with pytest.raises(BoardError) as per_task:
        parse_toml_board('run = "x"\nverify = "y"\n[[tasks]]\nid = "A"\ncolour = "red"\n')
    assert allowed_in(str(per_task.value)) == {k for k, s in SCOPES.items() if s != BOARD}


def test_every_field_a_board_can_set_is_a_key_of_its_scope():
    # `acceptance` is a markdown board's prose Verification cell; `path` and `format` the file's.
    task_fields = {f.name for f in fields(TaskSpec)} - {"acceptance"}
    board_fields = {f.name for f in fields(Board)} - {"tasks", "path", "format"}
    assert {k for k, s in SCOPES.items() if s in (TASK, BOTH)} == task_fields
    assert {k for k, s in SCOPES.items() if s == BOARD} == board_fields
    assert len(SCOPES) == len(KEYS), "each key once"


def test_a_board_wide_default_reaches_every_task_that_does_not_set_its_own():
    board = parse_toml_board('run = "make"\nverify = "true"\ntimeout_seconds = 5\n'
                             'env = ["NPM_TOKEN"]\njudge_run = "./review.sh"\n[[tasks]]\nid = "A"\n'
                             '[[tasks]]\nid = "B"\ntimeout_seconds = 9\n')
    a, b = board.tasks
    assert (a.run, a.timeout_seconds, a.env) == ("make", 5, ["NPM_TOKEN"])
    assert a.judge_run == "./review.sh"
    assert b.timeout_seconds == 9


def test_the_queue_keys_reach_the_board_with_their_defaults():
    board = parse_toml_board('land = "queue"\nrun = "x"\nverify = "y"\nqueue_parallel = 2\n'
                             '[[tasks]]\nid = "A"\n')
    assert (board.queue_parallel, board.queue_flake_retries) == (2, 1)
    assert {k.name: k.default for k in KEYS}["queue_parallel"] == "4"


def test_the_keys_table_has_a_row_per_key_with_every_column():
    lines = keys_table().splitlines()
    assert len(lines) == 2 + len(KEYS)
    for key, line in zip(KEYS, lines[2:]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == f"`{key.name}`" and len(cells) == 6, line
        assert all(cells) and key.type in ("string", "whole number", "number", "true/false",
                                           "list of strings"), line
    assert {k.name: k.type for k in KEYS}["timeout_seconds"] == "number"
    assert {k.name: k.default for k in KEYS}["worktree"] == "`true`"


def test_what_the_planner_writes_are_task_keys_of_its_role():
    keys = {k.name: k for k in KEYS}
    assert set(PLANNER_WRITES) <= {k for k, s in SCOPES.items() if s != BOARD}
    assert all(PLANNER in keys[k].roles or "all" in keys[k].roles for k in PLANNER_WRITES)
