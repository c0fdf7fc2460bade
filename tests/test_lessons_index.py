"""The lessons index on real JSONL files: lookups, malformed lines, durable shared appends."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest

from taskfleet.activities.services.lessons_index import LessonsIndex, normalize_pattern
from taskfleet.core.models.lessons import Lesson, LessonQuery
from tests.conftest import ROOT, python_cmd


def lesson(i: int, **kw) -> dict:
    base = {
        "id": f"L{i}",
        "task_type": ["codemod", "feature", "bugfix"][i % 3],
        "activity_type": ["implement", "verify"][i % 2],
        "failure_type": ["verify_failed", "timeout", "exec_failed", "verify_failed"][i % 4],
        "failure_msg": f"AssertionError in test_parser_{i % 5}: expected {i} got {i + 1}",
        "resolution": f"fix {i}",
        "times_seen": (i % 7) + 1,
        "first_seen": f"2026-03-{(i % 28) + 1:02d}T10:00:00+00:00",
        "last_seen": f"2026-03-{(i % 28) + 1:02d}T12:00:00+00:00",
        "metadata": {"n": i},
    }
    base.update(kw)
    return base


def write_jsonl(path: Path, rows: list) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


@pytest.fixture
def index(tmp_path: Path) -> LessonsIndex:
    path = tmp_path / "lessons.jsonl"
    write_jsonl(path, [lesson(i) for i in range(60)])
    idx = LessonsIndex(path)
    idx.load()
    return idx


def test_keyed_finds_are_exact_limited_and_newest_first(index: LessonsIndex):
    found = index.find("task_type", "codemod", limit=5)
    assert len(found) == 5
    assert all(x.task_type == "codemod" for x in found)
    stamps = [x.last_seen for x in found]
    assert stamps == sorted(stamps, reverse=True)
    assert len(index.find("task_type", "codemod", limit=100)) == 20
    assert index.find("failure_type", "no-such-type") == []
    by_pattern = index.find("pattern", "AssertionError in test_parser_1: expected 999 got 3")
    assert by_pattern and all(x.pattern == "assertionerror in test_parser_1: expected <n> got <n>"
                              for x in by_pattern)


def test_and_query_matches_every_field(index: LessonsIndex):
    matches = index.query(
        LessonQuery(task_type="feature", activity_type="verify", failure_type="timeout", limit=50))
    expected = {f"L{i}" for i in range(60) if i % 3 == 1 and i % 2 == 1 and i % 4 == 1}
    assert {m.lesson.id for m in matches} == expected and expected


def test_time_range_and_most_frequent(index: LessonsIndex):
    ranged = index.query(LessonQuery(seen_after="2026-03-10T00:00:00+00:00",
                                     seen_before="2026-03-12T23:59:59+00:00", limit=100))
    assert {m.lesson.last_seen[:10] for m in ranged} == {"2026-03-10", "2026-03-11", "2026-03-12"}
    assert len(ranged) == sum(1 for i in range(60) if 10 <= (i % 28) + 1 <= 12)
    top = index.query(LessonQuery(most_frequent=True, limit=3))
    assert [m.lesson.times_seen for m in top] == [7, 7, 7]
    top_codemod = index.query(LessonQuery(task_type="codemod", most_frequent=True, limit=2))
    assert all(m.lesson.task_type == "codemod" for m in top_codemod)
    assert top_codemod[0].lesson.times_seen == max(lesson(i)["times_seen"] for i in range(0, 60, 3))


def test_similar_failure_search_ranks_the_closest_first(tmp_path: Path):
    path = tmp_path / "l.jsonl"
    rows = [lesson(i, failure_msg=f"timeout after {i}s waiting for database") for i in range(20)]
    rows.append(lesson(99, failure_msg="ModuleNotFoundError: No module named 'fleetparser'"))
    write_jsonl(path, rows)
    idx = LessonsIndex(path)
    idx.load()
    best = idx.query(LessonQuery(similar_to="ImportError: no module named fleetparser", limit=3))
    assert best[0].lesson.id == "L99" and best[0].score > 0
    assert len(idx.query(LessonQuery(similar_to="database timeout", limit=4))) == 4


def test_results_are_copies(index: LessonsIndex):
    first = index.find("task_type", "codemod", limit=1)[0]
    first.failure_msg = "corrupted"
    first.metadata["n"] = -1
    again = index.get(first.id)
    assert again.failure_msg != "corrupted" and again.metadata["n"] != -1


def test_malformed_lines_are_skipped_counted_and_located(tmp_path: Path):
    path = tmp_path / "l.jsonl"
    rows = [lesson(1), "{not json", lesson(2), json.dumps([1, 2]), lesson(3, times_seen="many"), "",
            lesson(4, id="")]
    write_jsonl(path, rows)
    idx = LessonsIndex(path)
    stats = idx.load()
    assert stats.lessons == 2
    assert stats.malformed_lines == 4
    assert stats.malformed_line_numbers == [2, 4, 5, 7]


def test_missing_file_is_empty_and_rebuild_gives_same_count(tmp_path: Path, index: LessonsIndex):
    empty = LessonsIndex(tmp_path / "absent.jsonl")
    assert empty.load().lessons == 0
    before = len(index)
    assert index.load().lessons == before == 60


def test_same_failure_again_bumps_times_seen(tmp_path: Path):
    path = tmp_path / "l.jsonl"
    idx = LessonsIndex(path)
    idx.load()
    first = idx.record(
        Lesson(task_type="codemod", activity_type="implement", failure_type="verify_failed",
               failure_msg="test_x failed at /tmp/abc123/work.py line 12, sha deadbeef1"))
    second = idx.record(
        Lesson(task_type="codemod", activity_type="implement", failure_type="verify_failed",
               failure_msg="test_x failed at /tmp/zz9/work.py line 40, sha cafebabe2",
               resolution="pin x"))
    assert second.id == first.id and second.times_seen == 2 and second.resolution == "pin x"
    assert len(idx) == 1
    assert normalize_pattern(first.failure_msg) == first.pattern
    reloaded = LessonsIndex(path)
    assert reloaded.load().lessons == 1
    assert reloaded.get(first.id).times_seen == 2


def test_two_processes_appending_one_file_both_see_all(tmp_path: Path):
    path = tmp_path / "shared.jsonl"
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from taskfleet.activities.services.lessons_index import LessonsIndex\n"
        "from taskfleet.core.models.lessons import Lesson\n"
        "idx = LessonsIndex(sys.argv[2]); idx.load()\n"
        "for i in range(50):\n"
        "    idx.record(Lesson(task_type=sys.argv[3], failure_type='exec_failed', "
        "failure_msg=f'{sys.argv[3]} boom {i} unique{i}x'))\n"
        "print(len(idx))\n"
    )
    procs = [
        subprocess.Popen(python_cmd("-c", script, str(ROOT), str(path), name),
                         stdout=subprocess.PIPE, text=True)
        for name in ("alpha", "beta")
    ]
    outputs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    # each saw its own 50 plus whatever the other had appended by its last write
    assert all(50 <= int(out) <= 100 for out in outputs)
    idx = LessonsIndex(path)
    assert idx.load().lessons == 100
    assert idx.stats().malformed_lines == 0
    late = LessonsIndex(path)
    late.load()
    with open(path, "a") as handle:
        handle.write(json.dumps(lesson(500, task_type="gamma")) + "\n")
    assert late.refresh() == 1
    assert late.find("task_type", "gamma")[0].id == "L500"


def test_concurrent_readers_during_writes(tmp_path: Path):
    path = tmp_path / "l.jsonl"
    write_jsonl(path, [lesson(i) for i in range(200)])
    idx = LessonsIndex(path)
    idx.load()
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        try:
            while not done.is_set():
                for match in idx.query(LessonQuery(failure_type="verify_failed", limit=20)):
                    assert match.lesson.failure_type == "verify_failed"
                idx.query(LessonQuery(similar_to="AssertionError expected", limit=5))
                idx.query(LessonQuery(most_frequent=True, limit=5))
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    readers = [threading.Thread(target=read) for _ in range(4)]
    for t in readers:
        t.start()
    for i in range(100):
        idx.record(Lesson(task_type="w", failure_type="verify_failed",
                          failure_msg=f"writer failure kind{i}"))
    done.set()
    for t in readers:
        t.join(timeout=30)
    assert not errors
    assert len(idx) == 300
    assert len(idx.find("task_type", "w", limit=1000)) == 100


@pytest.mark.parametrize("depth", [600, 5000])
def test_deeply_nested_lines_are_skipped_and_counted(tmp_path: Path, depth: int):
    """A line nested deeper than the decoder's recursion limit raises
    RecursionError (not ValueError); it must be skipped like any malformed line, as must a lesson
    whose metadata nests so deep that copying it for a query would fail."""
    path = tmp_path / "l.jsonl"
    deep_array = "[" * depth + "]" * depth
    deep_metadata = (json.dumps(lesson(3))[:-1] + ', "metadata": ' + '{"a": ' * depth + "1"
                     + "}" * depth + "}")
    write_jsonl(path, [lesson(1), deep_array, deep_metadata, lesson(4)])
    idx = LessonsIndex(path)
    stats = idx.load()
    assert stats.lessons == 2
    assert stats.malformed_lines == 2
    assert stats.malformed_line_numbers == [2, 3]
    assert {m.lesson.id for m in idx.query(LessonQuery(limit=10))} == {"L1", "L4"}
