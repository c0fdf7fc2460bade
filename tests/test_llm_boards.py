"""Board keys of the Claude implementer: parsed as named, defaults applied, bad ones refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskfleet.core.boards import BoardError, load_board, parse_toml_board, validate_board
from taskfleet.core.models.orchestrator import Board, TaskSpec

BOARD = '''
implementer = "anthropic"
verify = "make test"
model = "claude-haiku-4-5"
max_tokens = 4096
context = ["src/*.py", "README.md"]
max_attempts = 3
llm_batch = true
llm_batch_max_size = 50
llm_batch_max_age_seconds = 2.5

[[tasks]]
id = "A"

[[tasks]]
id = "B"
llm_batch = false
model = "claude-opus-4-5"
'''


def test_board_wide_defaults_and_per_task_keys() -> None:
    a, b = parse_toml_board(BOARD).tasks
    assert (a.implementer, a.model, a.max_tokens, a.context, a.max_attempts) == (
        "anthropic", "claude-haiku-4-5", 4096, ["src/*.py", "README.md"], 3)
    assert (a.llm_batch, a.llm_batch_max_size, a.llm_batch_max_age_seconds) == (True, 50, 2.5)
    assert (b.llm_batch, b.model, b.run) == (False, "claude-opus-4-5", "")


def test_defaults_when_unset() -> None:
    (t,) = parse_toml_board(
        '[[tasks]]\nid = "A"\nimplementer = "anthropic"\nverify = "true"\n').tasks
    assert (t.model, t.max_tokens, t.context, t.max_attempts) == ("", 8192, [], 2)
    assert (t.llm_batch, t.llm_batch_max_size, t.llm_batch_max_age_seconds) == (True, 100_000, 10.0)


@pytest.mark.parametrize(
    "row, words",
    [
        ('implementer = "anthropic"\nrun = "make"', "both implementer"),
        ('implementer = "openai"', "implementer must be"),
        ('implementer = "anthropic"\nmax_tokens = 0', "max_tokens"),
        ('implementer = "anthropic"\nmax_tokens = true', "max_tokens"),
        ('implementer = "anthropic"\ncontext = "src/*.py"', "context must be a list"),
        ('implementer = "anthropic"\ncontext = ["../secrets"]', "repo-relative"),
        ('implementer = "anthropic"\nmax_attempts = 0', "max_attempts"),
        ('implementer = "anthropic"\nllm_batch = "yes"', "llm_batch must be"),
        ('implementer = "anthropic"\nllm_batch_max_size = 0', "llm_batch_max_size"),
        ('implementer = "anthropic"\nllm_batch_max_age_seconds = -1', "llm_batch_max_age_seconds"),
        ('implementer = "anthropic"\nworktree = false', "worktree"),
        ('implementer = "anthropic"\nllm_batching = true', "unknown key"),
    ],
)
def test_bad_values_are_refused(row: str, words: str) -> None:
    with pytest.raises(BoardError, match=words):
        parse_toml_board(f'[[tasks]]\nid = "A"\nverify = "true"\n{row}\n')


def test_board_wide_run_and_implementer_together_are_refused() -> None:
    with pytest.raises(BoardError, match="both implementer"):
        parse_toml_board(
            'implementer = "anthropic"\nrun = "make"\nverify = "true"\n[[tasks]]\nid = "A"\n')


def test_a_task_choosing_claude_drops_the_board_wide_run() -> None:
    a, b = parse_toml_board('run = "make"\nverify = "true"\n[[tasks]]\nid = "A"\n'
                            'implementer = "anthropic"\n[[tasks]]\nid = "B"\n').tasks
    assert (a.implementer, a.run) == ("anthropic", "") and b.run == "make"


def test_markdown_board_takes_implementer_and_model_from_flags(tmp_path: Path) -> None:
    path = tmp_path / "board.md"
    path.write_text("| ID | Scope | Status | Branch | Verification |\n|---|---|---|---|---|\n"
                    "| M1 | add it | [ ] | task/M1 | `make test` |\n")
    (t,) = load_board(path, implementer="anthropic", model="claude-haiku-4-5").tasks
    assert (t.implementer, t.model, t.run, t.verify) == (
        "anthropic", "claude-haiku-4-5", "", "make test")


def test_workflow_input_is_checked_too() -> None:
    task = TaskSpec(id="A", branch="task/A", run="make", verify="true", implementer="anthropic")
    with pytest.raises(BoardError, match="both implementer"):
        validate_board(Board(tasks=[task]))
