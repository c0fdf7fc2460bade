"""Boards by reference and the run store: real clones, real git objects, real activities."""

from __future__ import annotations

import io
import json
import subprocess
import threading
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from taskfleet.activities.board_store import BoardStoreActivities
from taskfleet.clients.board_store import CloneUnreachable, store_board, store_board_file
from taskfleet.clients.run_store import iter_run_outcomes, write_json_with_tasks
from taskfleet.core.board_store import board_ref, read_page
from taskfleet.core.boards import BoardError, load_board
from taskfleet.core.models.board_store import (
    TASK_MAX_BYTES,
    BoardPageRequest,
    OutcomeBatch,
    ReadOutcomesRequest,
    StoreBoardInput,
)
from taskfleet.core.models.orchestrator import Board, TaskOutcome, TaskSpec
from taskfleet.core.run_store import RunStoreError, append_outcomes, iter_outcomes, run_ref
from tests.conftest import git
from tests.scale_support import page_starts, write_noop_board

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    path = tmp_path / "clone"
    git(tmp_path, "init", "-q", str(path))
    return path


def all_pages(clone: Path, board_id: str, **request) -> list:
    pages, start = [], 0
    while True:
        page = read_page(
            BoardPageRequest(repo=str(clone), board_id=board_id, start=start, **request))
        pages.append(page)
        assert page.next > start, "a page always moves forward"
        start = page.next
        if start >= page.total:
            return pages


def line_of(path: Path, text: str) -> int:
    return path.read_text().splitlines().index(text) + 1


def test_a_stored_board_reads_back_every_task_once_in_pages(clone, tmp_path):
    path = write_noop_board(tmp_path / "b.toml", 1234, max_parallel=7)
    stored = store_board_file(path, str(clone))
    assert stored.reference.tasks == 1234 and stored.reference.open_tasks == 1234
    assert (stored.settings.name == "noop" and stored.settings.max_parallel == 7
            and stored.settings.tasks == [])
    pages = all_pages(clone, stored.reference.board_id, max_tasks=100)
    ids = [t.id for p in pages for t in p.tasks]
    assert ids == [f"n{i}" for i in range(1234)]
    assert len(pages) == 13 and all(len(p.tasks) <= 100 for p in pages)
    first = pages[0].tasks[0]
    assert (first.run, first.verify, first.worktree, first.branch) == (
        "true", "true", False, "task/n0")


def test_stored_pages_are_the_tasks_the_board_parser_reads(clone):
    path = ROOT / "examples" / "demo-board.toml"
    stored = store_board_file(path, str(clone))
    parsed = load_board(path)
    (page,) = all_pages(clone, stored.reference.board_id)
    assert page.tasks == [t for t in parsed.tasks if not t.done]
    assert (stored.settings.max_parallel == parsed.max_parallel
            and stored.settings.name == parsed.name)


def test_a_malformed_task_on_page_7_fails_alone_naming_its_line(clone, tmp_path):
    clean = store_board_file(write_noop_board(tmp_path / "clean.toml", 6000), str(clone)).reference
    starts = page_starts(str(clone), clean.board_id, 7)
    bad = starts[6] + 17  # on page 7 (rows before it are the same on both boards, so are the pages)
    path = write_noop_board(tmp_path / "b.toml", 6000,
                            bad_rows={bad: "run = 5", bad + 1: 'run = "unterminated'})
    stored = store_board_file(path, str(clone))
    pages = all_pages(clone, stored.reference.board_id)
    refused = [r for p in pages for r in p.refused]
    assert [(r.index, r.id) for r in refused] == [(bad, f"n{bad}"), (bad + 1, f"n{bad + 1}")]
    assert [i for i, p in enumerate(pages) if p.refused] == [6]
    header = line_of(path, f'id = "n{bad}"') - 1
    assert refused[0].line == header
    assert refused[0].reason == f"{path}:{header}: 'run' must be a string"
    # a TOML syntax error names the line the error is on, not only where the task starts
    error_line = line_of(path, 'run = "unterminated')
    assert f"{path}:{error_line}: not valid TOML" in refused[1].reason
    assert sum(len(p.tasks) for p in pages) == 5998


def test_board_wide_problems_refuse_the_board_before_anything_is_stored(clone, tmp_path):
    cases = {
        'run = "x"\nverify = "y"\ncolour = "red"\n[[tasks]]\nid = "A"\n':
            "unknown board key(s) colour",
        'run = "x"\nverify = "y"\nland = "teleport"\n[[tasks]]\nid = "A"\n':
            "land must be 'push', 'merge' or 'queue'",
        'run = "x"\ntimeout_seconds = -1\n[[tasks]]\nid = "A"\n':
            "board-wide settings: timeout_seconds must be",
        'run = "x"\nverify = "y"\n': "no [[tasks]] tables",
        'run = "x\n[[tasks]]\nid = "A"\n': "not valid TOML",
        'run = "x"\nverify = "y"\n[[tasks]]\nid = "A"\n[[tasks]]\nid = "A"\n':
            ":5: duplicate task id A (first on line 3)",
        'run = "x"\nverify = "y"\n[[tasks]]\nid = "A"\n[[tasks]]\nid = "B"\nbranch = "task/A"\n':
            ":5: tasks A (line 3) and B share branch task/A",
    }
    for number, (text, message) in enumerate(cases.items()):
        path = tmp_path / f"b{number}.toml"
        path.write_text(text)
        with pytest.raises(BoardError) as caught:
            store_board_file(path, str(clone))
        assert message in str(caught.value), (text, str(caught.value))
    assert git(clone, "for-each-ref", "refs/taskfleet/") == ""


PER_TASK_BOARD = r'''run = "x"
verify = "y"
[[tasks]]
id = "A"
[[tasks]]
id = "A2"
run = 1
[[tasks]]
id = "B"
size = 3
[[tasks]]
id = "C"
branch = "-evil"
[[tasks]]
id = "D"
due = 2024-01-01
[[tasks]]
id = "E"
branch = "-"
x
[[tasks]]
id = "F"
[tasks.extra]
x = 1
'''


def test_per_task_problems_fail_that_task_with_its_line(clone, tmp_path):
    path = tmp_path / "b.toml"
    path.write_text(PER_TASK_BOARD)
    stored = store_board_file(path, str(clone))
    (page,) = all_pages(clone, stored.reference.board_id)
    assert [t.id for t in page.tasks] == ["A"]
    reasons = {r.id: r.reason for r in page.refused}
    header = {task: line_of(path, f'id = "{task}"') - 1 for task in "A2 B C D E F".split()}
    assert {r.id: r.line for r in page.refused} == header
    assert reasons["A2"] == f"{path}:{header['A2']}: 'run' must be a string"
    assert reasons["B"].startswith(f"{path}:{header['B']}: unknown key(s) size")
    assert reasons["C"].startswith(f"{path}:{header['C']}: task C: ") and "'-'" in reasons["C"]
    assert reasons["D"] == f"{path}:{header['D']}: 'due': a date is not a board value"
    # the line of the error
    assert reasons["E"].startswith(f"{path}:{line_of(path, 'x')}: not valid TOML")
    assert reasons["F"].startswith(f"{path}:{header['F']}: unknown key(s) extra")


MULTILINE_BOARD = r'''run = "x"
verify = "y"
[[tasks]]
id = "A"
template = """
[[tasks]]
id = "not a task"
"""
[[tasks]]
id = 'B'
scope = """x \""" still text
[[tasks]]"""
[[tasks]]
id = "C"
scope = 'say """ here' # """
[[tasks]]
id = "D"
scope = "a \" quote"
'''


def test_a_tasks_header_inside_a_multiline_string_is_text(clone, tmp_path):
    path = tmp_path / "b.toml"
    path.write_text(MULTILINE_BOARD)
    stored = store_board_file(path, str(clone))
    (page,) = all_pages(clone, stored.reference.board_id)
    assert [t.id for t in page.tasks] == ["A", "B", "C", "D"], page.refused
    assert page.tasks[0].template == '[[tasks]]\nid = "not a task"\n'
    assert page.tasks[1].scope == 'x """ still text\n[[tasks]]'


def test_inline_tasks_array_is_read_too(clone, tmp_path):
    path = tmp_path / "b.toml"
    path.write_text('run = "x"\nverify = "y"\ntasks = [{id = "A"}, {id = "B", run = 3}]\n')
    stored = store_board_file(path, str(clone))
    (page,) = all_pages(clone, stored.reference.board_id)
    assert [t.id for t in page.tasks] == ["A"]
    assert page.refused[0].reason == f"{path}:3: 'run' must be a string"


def test_markdown_board_rows_keep_their_lines_and_done_rows_are_not_dispatched(clone, tmp_path):
    path = ROOT / "examples" / "board-example.md"
    stored = store_board_file(path, str(clone), run="true", verify="true")
    parsed = load_board(path, run="true", verify="true")
    (page,) = all_pages(clone, stored.reference.board_id)
    assert page.tasks == [t for t in parsed.tasks if not t.done]
    assert page.done == sum(t.done for t in parsed.tasks) >= 1
    assert stored.reference.open_tasks == len(page.tasks)
    bad = tmp_path / "bad.md"
    bad.write_text(path.read_text().replace("| [ ] | `task/license-header` |",
                                            "| [?] | `task/license-header` |"))
    stored = store_board_file(bad, str(clone), run="true", verify="true")
    (page,) = all_pages(clone, stored.reference.board_id)
    (refused,) = page.refused
    assert refused.id == "license-header" and refused.reason.startswith(
        f"{bad}:{refused.line}: status must be [ ] or [x]")
    assert "license-header" in bad.read_text().splitlines()[refused.line - 1]
    with pytest.raises(BoardError, match="has no run command"):
        store_board_file(path, str(clone))


def test_pages_stay_under_their_byte_budget_and_a_huge_task_fails_alone(clone):
    tasks = [TaskSpec(id=f"t{i}", run="true", verify="true", scope="x" * 5000) for i in range(100)]
    tasks[42].scope = "y" * (TASK_MAX_BYTES + 1)
    stored = store_board(Board(tasks=tasks, name="big"), str(clone))
    pages = all_pages(clone, stored.reference.board_id, max_bytes=64 * 1024)
    assert len(pages) > 5
    for page in pages:
        assert sum(len(json.dumps(vars(t))) for t in page.tasks) <= 64 * 1024
    (refused,) = [r for p in pages for r in p.refused]
    assert refused.id == "t42" and f"at most {TASK_MAX_BYTES // 1024} KB" in refused.reason
    assert sum(len(p.tasks) for p in pages) == 99


def test_the_same_board_is_the_same_reference_and_survives_gc(clone, tmp_path):
    path = write_noop_board(tmp_path / "b.toml", 50)
    first = store_board_file(path, str(clone)).reference
    second = store_board_file(path, str(clone)).reference
    assert first == second
    git(clone, "gc", "-q", "--prune=now")
    assert git(clone, "rev-parse", board_ref(first.board_id)) == first.board_id
    assert len(all_pages(clone, first.board_id)[0].tasks) == 50


async def test_unreachable_clone_and_unknown_board_are_one_clear_line(clone, tmp_path):
    with pytest.raises(CloneUnreachable, match="is not a git repository from here"):
        store_board(Board(tasks=[TaskSpec(id="a", run="x", verify="y")]), str(tmp_path / "nowhere"))
    missing = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(ApplicationError, match=f"no stored board {missing}") as caught:
        await ActivityEnvironment().run(
            BoardStoreActivities().load_board_page,
            BoardPageRequest(repo=str(clone), board_id=missing, start=0)
        )
    assert caught.value.non_retryable


async def test_activities_load_a_page_and_record_a_batch_once(clone, tmp_path):
    path = write_noop_board(tmp_path / "b.toml", 30)
    stored = store_board_file(path, str(clone))
    activities = BoardStoreActivities()
    env = ActivityEnvironment()
    page = await env.run(activities.load_board_page, BoardPageRequest(
        repo=str(clone), board_id=stored.reference.board_id, start=10, max_tasks=5))
    assert [t.id for t in page.tasks] == ["n10", "n11", "n12", "n13", "n14"] and page.next == 15
    ref = run_ref("taskfleet-run-noop-1", "run-1")
    batch = OutcomeBatch(repo=str(clone), run_ref=ref, batch_id="1-0",
                         outcomes=[TaskOutcome(id=t.id, status="succeeded") for t in page.tasks],
                         rows=page.rows)
    first = await env.run(activities.record_outcomes, batch)
    again = await env.run(activities.record_outcomes, batch)  # a retry after a lost reply
    assert (first.recorded, first.already_recorded) == (5, False)
    assert again.already_recorded and again.commit == first.commit
    assert [o["id"] for o in iter_run_outcomes(str(clone), ref)] == [t.id for t in page.tasks]
    assert next(iter_run_outcomes(str(clone), ref)) == {
        **asdict(TaskOutcome(id="n10", status="succeeded")), "row": 10}
    # a small run's outcomes come back in board order (the store keeps them in finishing order)
    late = OutcomeBatch(repo=str(clone), run_ref=ref, batch_id="1-1",
                        outcomes=[TaskOutcome(id="n3", status="failed")], rows=[3])
    await env.run(activities.record_outcomes, late)
    small = await env.run(activities.read_outcomes,
                          ReadOutcomesRequest(repo=str(clone), run_ref=ref))
    assert small.complete and [o.id for o in small.outcomes] == [
        "n3", "n10", "n11", "n12", "n13", "n14"]
    assert small.outcomes[0] == TaskOutcome(id="n3", status="failed")
    big = await env.run(activities.read_outcomes,
                        ReadOutcomesRequest(repo=str(clone), run_ref=ref, max_outcomes=5))
    assert not big.complete and big.outcomes == []


def test_parallel_writers_lose_no_outcome(clone):
    ref = run_ref("wf", "first")
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for b in range(8):
                append_outcomes(clone, ref, f"w{w}-{b}",
                                [{"id": f"w{w}-b{b}-{i}"} for i in range(3)])
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    ids = [o["id"] for o in iter_outcomes(clone, ref)]
    assert sorted(ids) == sorted(f"w{w}-b{b}-{i}" for w in range(6) for b in range(8)
                                 for i in range(3))
    assert int(git(clone, "rev-list", "--count", ref)) == 48


def test_run_refs_are_valid_and_distinct_for_any_workflow_id(clone):
    ids = ["plain", "with space/and..dots.lock", ".hidden", "ünïcode", "a" * 300,
           "with space/and..dots.lock!"]
    refs = {run_ref(w, "0f3c-1") for w in ids}
    assert len(refs) == len(ids)
    for ref in refs:
        subprocess.run(["git", "check-ref-format", ref], check=True)


def test_reading_a_run_that_recorded_nothing_or_a_missing_clone(clone, tmp_path):
    assert list(iter_outcomes(clone, run_ref("wf", "none"))) == []
    with pytest.raises(RunStoreError, match="cannot read outcomes from"):
        list(iter_outcomes(tmp_path / "nowhere", run_ref("wf", "none")))


def test_streamed_json_is_the_json_of_the_whole_object():
    head = {"status": "COMPLETED", "counts": {"succeeded": 2, "failed": 0}}
    tasks = [{"id": "a", "status": "succeeded", "nested": {"x": [1, 2]}},
             {"id": "b", "status": "failed"}]
    tail = {"stats": {"runs": 3, "list": [1, {"y": 2}]}}
    for rows in (tasks, []):
        out = io.StringIO()
        assert write_json_with_tasks(out, head, iter(rows), tail) == len(rows)
        assert out.getvalue() == json.dumps({**head, "tasks": rows, **tail}, indent=2) + "\n"


def test_noop_boards_parse_as_boards(tmp_path):
    path = write_noop_board(tmp_path / "b.toml", 5, max_parallel=3)
    board = load_board(path)
    assert [t.id for t in board.tasks] == ["n0", "n1", "n2", "n3", "n4"] and board.max_parallel == 3
    assert all(not t.worktree and t.run == "true" and t.verify == "true" for t in board.tasks)


async def test_an_inline_board_is_stored_by_an_activity_and_read_back(clone):
    tasks = [TaskSpec(id=f"t{i}", run="true", verify="true", worktree=False, done=i == 1)
             for i in range(4)]
    reference = await ActivityEnvironment().run(
        BoardStoreActivities().store_board,
        StoreBoardInput(repo=str(clone), board=Board(tasks=tasks, name="inline"))
    )
    assert (reference.tasks, reference.open_tasks, reference.name) == (4, 3, "inline")
    (page,) = all_pages(clone, reference.board_id)
    assert page.tasks == [replace(tasks[i], branch=f"task/t{i}") for i in (0, 2, 3)]
    assert page.rows == [0, 2, 3] and page.done == 1
    with pytest.raises(ApplicationError, match="cannot store the board") as caught:
        await ActivityEnvironment().run(
            BoardStoreActivities().store_board,
            StoreBoardInput(repo=str(clone) + "-gone", board=Board(tasks=tasks))
        )
    assert caught.value.non_retryable
