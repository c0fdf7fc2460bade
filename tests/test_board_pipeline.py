"""A board file along its one path: parse -> check -> store, each stage handing the next a dataclass
(real files, a real clone; the start stage is covered by the CLI tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskfleet.clients.board_store import StoredBoard, store_board, store_checked_board
from taskfleet.core.boards import (
    BoardError,
    CheckedBoard,
    ParsedBoard,
    check_board,
    load_board,
    parse_board_file,
)
from taskfleet.core.models.orchestrator import Board, TaskSpec
from tests.conftest import git

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "board-example.md"


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    path = tmp_path / "clone"
    git(tmp_path, "init", "-q", str(path))
    return path


def test_overrides_apply_at_the_check_stage_and_the_store_reads_the_rows_once(clone):
    parsed = parse_board_file(EXAMPLE)
    assert isinstance(parsed, ParsedBoard) and parsed.format == "markdown"
    # the file as written: no CLI settings yet
    assert parsed.head is not None and parsed.head.settings == {}
    checked = check_board(parsed, run="true", verify="true", max_parallel=3, land=None)
    assert isinstance(checked, CheckedBoard) and checked.head is not None
    assert checked.head.settings == {"run": "true", "verify": "true", "max_parallel": 3}
    assert checked.settings.max_parallel == 3 and checked.settings.tasks == []
    stored = store_checked_board(checked, str(clone))
    assert isinstance(stored, StoredBoard) and stored.settings.max_parallel == 3
    whole = load_board(EXAMPLE, run="true", verify="true")
    assert stored.first_page is not None and stored.first_page.tasks == [
        t for t in whole.tasks if not t.done]
    assert next(checked.rows, None) is None  # the stream is spent: no stage reads it again


def test_a_markdown_board_without_run_is_refused_as_its_first_open_row_is_read(clone):
    checked = check_board(parse_board_file(EXAMPLE), verify="true")  # the board-wide part is fine
    with pytest.raises(BoardError,
                       match=r"board-example\.md:\d+: task changelog has no run command"):
        store_checked_board(checked, str(clone))
    assert git(clone, "for-each-ref", "refs/taskfleet/") == ""


def test_the_verify_notice_names_the_rows_that_keep_their_own_command(clone, tmp_path):
    checked = check_board(parse_board_file(EXAMPLE), run="true", verify="make test")
    store_checked_board(checked, str(clone))
    assert checked.own_verification == ["done-file"]  # complete once the store has read every row
    # A board with a row that cannot run as written gives no notice (as a whole-board parse would
    # not).
    bad = tmp_path / "bad.md"
    bad.write_text(EXAMPLE.read_text().replace("| [ ] | `task/license-header` |",
                                               "| [?] | `task/license-header` |"))
    checked = check_board(parse_board_file(bad), run="true", verify="make test")
    stored = store_checked_board(checked, str(clone))
    assert checked.own_verification == []
    assert isinstance(stored, StoredBoard) and [r.id for r in stored.first_page.refused] == [
        "license-header"]


def test_a_board_checked_whole_goes_inline_and_its_first_bad_row_refuses_it(clone, tmp_path):
    path = tmp_path / "b.toml"
    path.write_text('run = "x"\nverify = "y"\n[[tasks]]\nid = "A"\n[[tasks]]\nid = "B"\nrun = 5\n')
    with pytest.raises(BoardError, match="'run' must be a string"):
        check_board(parse_board_file(path, whole=True))
    path.write_text('run = "x"\nverify = "y"\n[[tasks]]\nid = "A"\n')
    checked = check_board(parse_board_file(path, whole=True), max_parallel=2)
    inline = store_checked_board(checked, str(clone))
    assert (inline is checked.board and inline.max_parallel == 2
            and [t.id for t in inline.tasks] == ["A"])
    # nothing stored here: the start decides
    assert git(clone, "for-each-ref", "refs/taskfleet/") == ""


def test_a_missing_file_is_refused_at_the_parse_stage(tmp_path):
    with pytest.raises(BoardError, match="cannot read board .*nowhere.toml"):
        parse_board_file(tmp_path / "nowhere.toml")


def test_a_markdown_board_of_claude_tasks_needs_no_run(clone, tmp_path):
    path = tmp_path / "board.md"
    path.write_text("| ID | Scope | Status | Branch | Verification |\n|---|---|---|---|---|\n"
                    "| M1 | add it | [ ] | task/M1 | `make test` |\n")
    checked = check_board(parse_board_file(path), implementer="anthropic")  # and no --run
    stored = store_checked_board(checked, str(clone))
    assert isinstance(stored, StoredBoard) and stored.first_page is not None
    (task,) = stored.first_page.tasks
    assert (task.implementer, task.run, task.verify) == ("anthropic", "", "make test")
    assert stored.first_page.tasks == load_board(path, implementer="anthropic").tasks


def test_a_board_built_in_code_is_checked_where_it_enters(clone):
    bad = Board(tasks=[TaskSpec(id="A", run="x", verify="y")], max_parallel=0)
    with pytest.raises(BoardError, match="max_parallel must be a whole number >= 1"):
        store_board(bad, str(clone))
    twice = Board(tasks=[TaskSpec(id="A", run="x", verify="y")] * 2)
    with pytest.raises(BoardError, match="duplicate task id A"):
        store_board(twice, str(clone))
    assert git(clone, "for-each-ref", "refs/taskfleet/") == ""
