"""The judge's board keys (parsed as named, defaults, refused with the key named), the check of a
judge's answer against `submit_review`'s schema, and a judge command's verdict
from its exit code."""

from __future__ import annotations

import pytest

from taskfleet.activities.judge import command_review, verify_output
from taskfleet.core.boards import BoardError, parse_toml_board
from taskfleet.core.review_schema import ReviewInvalid, parse_review
from taskfleet.core.task_stage import InvalidStage, parse_task_stage


def test_board_wide_judge_and_per_task_keys() -> None:
    a, b, c = parse_toml_board('''
run = "make"
verify = "make test"
judge = "anthropic"
judge_model = "claude-haiku-4-5"
judge_max_tokens = 2048

[[tasks]]
id = "A"

[[tasks]]
id = "B"
judge_run = "./review.sh"

[[tasks]]
id = "C"
judge = ""
''').tasks
    assert (a.judge, a.judge_model, a.judge_template, a.judge_max_tokens, a.judge_run) == (
        "anthropic", "claude-haiku-4-5", "judge.j2", 2048, "")
    assert (b.judge, b.judge_run) == ("", "./review.sh")  # the task's own kind of judge wins
    assert (c.judge, c.judge_run) == ("", "")  # a task may go without the board's judge


def test_defaults_when_unset() -> None:
    (t,) = parse_toml_board('[[tasks]]\nid = "A"\nrun = "true"\nverify = "true"\n').tasks
    assert (t.judge, t.judge_model, t.judge_template, t.judge_max_tokens, t.judge_run) == (
        "", "", "judge.j2", 4096, "")


@pytest.mark.parametrize("row, words", [
    ('judge = "openai"', "judge must be 'anthropic'"),
    ('judge = true', "judge must be 'anthropic'"),
    ('judge = "anthropic"\njudge_run = "x"', "both judge"),
    ('judge_run = 3', "judge_run must be"),
    ('judge = "anthropic"\njudge_model = 7', "judge_model"),
    ('judge = "anthropic"\njudge_template = ""', "judge_template"),
    ('judge = "anthropic"\njudge_max_tokens = 0', "judge_max_tokens"),
    ('judge = "anthropic"\njudge_max_tokens = 1.5', "judge_max_tokens"),
    ('judge_run = "x"\nworktree = false', "worktree = true"),
    ('judges = "anthropic"', "unknown key"),
])
def test_bad_judge_keys_are_refused_naming_the_key(row: str, words: str) -> None:
    with pytest.raises(BoardError, match=words):
        parse_toml_board(f'[[tasks]]\nid = "A"\nrun = "true"\nverify = "true"\n{row}\n')


def test_a_bad_board_wide_judge_key_refuses_the_board() -> None:
    with pytest.raises(BoardError, match="judge_max_tokens"):
        parse_toml_board('judge = "anthropic"\njudge_max_tokens = -1\n[[tasks]]\nid = "A"\n'
                         'run = "x"\nverify = "y"\n')


def test_a_good_review_is_read_and_bounded() -> None:
    review = parse_review({"verdict": "revise", "reasons": ["r" * 5000], "extra": 1,
                           "comments": [{"path": "a.py", "line": 3, "text": "t"},
                                        {"path": "b", "text": "u"}]})
    assert review.verdict == "revise" and len(review.reasons[0]) == 2000
    assert [(c.path, c.line) for c in review.comments] == [("a.py", 3), ("b", None)]
    assert parse_review({"verdict": "approve", "reasons": [], "comments": []}).verdict == "approve"


@pytest.mark.parametrize("answer, words", [
    (None, "must be an object"),
    ({"verdict": "maybe", "reasons": []}, "verdict must be one of"),
    ({"verdict": "approve", "reasons": "fine"}, "reasons must be a list"),
    ({"verdict": "approve", "reasons": [1]}, "reasons must be a list"),
    ({"verdict": "approve", "comments": {}}, "comments must be a list"),
    ({"verdict": "revise", "reasons": ["x"], "comments": [{"path": "a"}]}, "path and text"),
    ({"verdict": "revise", "reasons": ["x"],
      "comments": [{"path": "a", "text": "t", "line": "3"}]}, "line must be"),
    ({"verdict": "revise", "reasons": ["x"],
      "comments": [{"path": "a", "text": "t", "line": True}]}, "line must be"),
    ({"verdict": "reject", "reasons": [], "comments": []}, "needs its reasons"),
])
def test_answers_off_the_schema_are_refused(answer: object, words: str) -> None:
    with pytest.raises(ReviewInvalid, match=words):
        parse_review(answer)


@pytest.mark.parametrize("code, verdict", [(0, "approve"), (2, "revise"), (1, "reject"),
                                           (127, "reject"), (None, "reject")])
def test_a_judge_commands_exit_code_is_its_verdict(code: int | None, verdict: str) -> None:
    review = command_review(code, "looks off\nsrc/a.py:12: this line\n\n", "./judge", 30)
    assert review.verdict == verdict
    assert [(c.path, c.line, c.text) for c in review.comments] == [("src/a.py", 12, "this line")]
    assert ("timed out after 30s" in review.reasons[0]) == (code is None)


def test_a_silent_judge_command_still_gives_a_reason() -> None:
    assert command_review(1, "", "./judge", 30).reasons == [
        "the judge command `./judge` exited with 1 and printed no reasons"]
    assert command_review(0, "", "./judge", 30).reasons == []


def test_the_judge_sees_the_verify_commands_own_output() -> None:
    tail = ("[taskfleet] attempt 1: x\n$ (run) make\nbuilt\n$ (verify) make test\n"
            "Ran 3 tests in 0.01s\nOK\n")
    assert verify_output(tail) == "Ran 3 tests in 0.01s\nOK"


@pytest.mark.parametrize("args", [(), ("a", "b"), ("x",), ({"task_id": "A", "stage": "dancing"},),
                                  ({"task_id": "", "stage": "judging"},),
                                  ({"task_id": "A", "stage": "judging", "verdict": "maybe"},)])
def test_bad_task_stage_signals_are_refused(args: tuple) -> None:
    with pytest.raises(InvalidStage):
        parse_task_stage(args)
    assert parse_task_stage(
        ({"task_id": "A", "stage": "judging", "verdict": "revise"},)).verdict == "revise"


def test_a_markdown_board_takes_its_judge_from_run_flags(tmp_path) -> None:
    import argparse

    from taskfleet.cli.run import _board_overrides, add_commands
    from taskfleet.core.boards import load_board

    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers())
    path = tmp_path / "board.md"
    path.write_text("| ID | Scope | Status | Branch | Verification |\n|---|---|---|---|---|\n"
                    "| M1 | add it | [ ] | task/M1 | `make test` |\n")
    args = parser.parse_args(
        ["run", str(path), "--repo", ".", "--run", "make", "--judge-run", "./review.sh"])
    (t,) = load_board(path, **_board_overrides(args)).tasks
    assert (t.judge, t.judge_run) == ("", "./review.sh")
    args = parser.parse_args(
        ["run", str(path), "--repo", ".", "--run", "make", "--judge", "anthropic"])
    assert load_board(path, **_board_overrides(args)).tasks[0].judge == "anthropic"
