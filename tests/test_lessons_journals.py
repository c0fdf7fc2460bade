"""Lessons shared by pods: each pod appends to its own journal, every pod reads them all."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from taskfleet.activities.services.lessons_journals import JournaledLessonsIndex
from taskfleet.core.models.lessons import Lesson, LessonQuery
from tests.conftest import ROOT, eventually


def lesson(msg: str, task_type: str = "build") -> Lesson:
    return Lesson(task_type=task_type, activity_type="run_task", failure_type="verify_failed",
                  failure_msg=msg, resolution="pin the version")


def test_a_pod_writes_only_its_own_journal_and_reads_every_other(tmp_path: Path):
    a = JournaledLessonsIndex(tmp_path, "pod-a", refresh_interval=0)
    b = JournaledLessonsIndex(tmp_path, "pod-b", refresh_interval=0)
    a.load(), b.load()
    stored = a.record(lesson("ImportError: no module named yaml"))
    found = b.query(LessonQuery(failure_type="verify_failed"))
    assert [m.lesson.id for m in found] == [stored.id]
    # The same failure on pod B bumps the same lesson (its id travels), in B's own journal.
    bumped = b.record(lesson("ImportError: no module named yaml"))
    assert bumped.id == stored.id and bumped.times_seen == 2
    assert a.get(stored.id) is not None
    assert a.query(LessonQuery(task_type="build"))[0].lesson.times_seen == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pod-a.jsonl", "pod-b.jsonl"]
    assert len((tmp_path / "pod-a.jsonl").read_text().splitlines()) == 1
    assert len((tmp_path / "pod-b.jsonl").read_text().splitlines()) == 1
    # A third pod starting now builds from every journal: one lesson, the newest line of it.
    c = JournaledLessonsIndex(tmp_path, "pod-c")
    stats = c.load()
    assert stats.lessons == 1 and stats.path == str(tmp_path)
    assert c.get(stored.id).times_seen == 2


def test_half_written_and_broken_lines_of_another_pod(tmp_path: Path):
    b = JournaledLessonsIndex(tmp_path, "pod-b", refresh_interval=0)
    b.load()
    journal = tmp_path / "pod-a.jsonl"
    line = json.dumps({"id": "l1", "failure_type": "timeout", "failure_msg": "took too long",
                       "last_seen": "2026-01-01T00:00:00+00:00"})
    journal.write_text("not json\n" + line[:20])
    assert b.refresh() == 0  # the broken line is counted, the half line waits
    assert b.stats().malformed_lines == 1
    with open(journal, "a") as handle:
        handle.write(line[20:] + "\n")
    assert b.refresh() == 1
    assert b.get("l1").failure_msg == "took too long"
    assert b.journals()["pod-a.jsonl"].malformed_lines == [1]


def test_an_older_line_read_later_never_replaces_a_newer_one(tmp_path: Path):
    def write(pod: str, seen: str, times: int) -> None:
        with open(tmp_path / f"{pod}.jsonl", "a") as handle:
            handle.write(json.dumps(
                {"id": "same", "failure_type": "x", "failure_msg": "m", "times_seen": times,
                 "first_seen": "2026-01-01T00:00:00+00:00", "last_seen": seen}) + "\n")

    write("pod-z", "2026-01-03T00:00:00+00:00", 3)
    index = JournaledLessonsIndex(tmp_path, "me", refresh_interval=0)
    index.load()
    write("pod-a", "2026-01-02T00:00:00+00:00", 2)  # older, and read after the newer one
    index.refresh()
    assert index.get("same").times_seen == 3
    assert len(index) == 1


RECORDER = """
import sys
from taskfleet.activities.services.lessons_journals import JournaledLessonsIndex
from taskfleet.core.models.lessons import Lesson
index = JournaledLessonsIndex(sys.argv[1], sys.argv[2])
index.load()
print(index.record(Lesson(task_type="deploy", failure_type="exec_failed", failure_msg=sys.argv[3])).id)
"""  # noqa: E501 (a script's text)


async def test_a_lesson_recorded_by_another_process_reaches_this_index_within_seconds(
        tmp_path: Path):
    shared = tmp_path / "lessons"
    here = JournaledLessonsIndex(shared, "pod-b")
    here.load()
    out = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", RECORDER, str(shared),
                                                   "pod-a", "permission denied on /srv/x"],
                                  cwd=ROOT, capture_output=True, text=True, check=True)
    lesson_id = out.stdout.strip()

    async def arrived() -> None:
        found = here.query(LessonQuery(similar_to="permission denied"))
        assert [m.lesson.id for m in found] == [lesson_id]

    await eventually(arrived, timeout=10)


def test_the_setting_selects_journals(tmp_path: Path, monkeypatch):
    from taskfleet.activities.services.lessons_index import LessonsIndex
    from taskfleet.activities.services.lessons_journals import lessons_index_for
    from taskfleet.core.settings import TaskfleetSettings

    monkeypatch.delenv("TASKFLEET_LESSONS_DIR", raising=False)
    assert type(lessons_index_for(TaskfleetSettings(state_dir=tmp_path / "state"))) is LessonsIndex
    monkeypatch.setenv("TASKFLEET_LESSONS_DIR", str(tmp_path / "shared"))
    monkeypatch.setenv("TASKFLEET_POD_ID", "pod-q")
    index = lessons_index_for(TaskfleetSettings(state_dir=tmp_path / "state"))
    assert isinstance(index, JournaledLessonsIndex)
    assert index.path == tmp_path / "shared" / "pod-q.jsonl"
