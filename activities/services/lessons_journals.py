"""Lessons shared by a fleet of pods: one journal per pod in a shared folder, all read by every pod.
Pods share no lock, so no file has two writers: a pod appends to `<lessons_dir>/<pod>.jsonl` and
reads the others incrementally. Per id the later `last_seen` wins (racing bumps may undercount
`times_seen`). Set by TASKFLEET_LESSONS_DIR (and TASKFLEET_POD_ID)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from taskfleet.activities.services.lessons_index import (
    _UNREADABLE,
    LessonsIndex,
    _decode,
    _decode_chunk,
    lesson_from_json,
)
from taskfleet.core.models.lessons import Lesson, LessonMatch, LessonQuery, LessonsStats

JOURNAL_SUFFIX = ".jsonl"
# Queries look for other pods' new lines at most this often (a listdir and a stat per journal).
REFRESH_INTERVAL_SECONDS = 0.5
_REPORTED_MALFORMED = 20


@dataclass
class JournalTail:
    """How far this pod has read one other pod's journal."""

    path: Path
    offset: int = 0
    line_no: int = 0
    malformed: int = 0
    malformed_lines: list[int] = field(default_factory=list)


class JournaledLessonsIndex(LessonsIndex):
    """A `LessonsIndex` on this pod's journal, fed as well by every other pod's journal."""

    def __init__(self, directory: Path | str, pod: str,
                 refresh_interval: float = REFRESH_INTERVAL_SECONDS) -> None:
        self.directory = Path(directory)
        self.pod = pod
        self.refresh_interval = refresh_interval
        self._next_refresh = 0.0
        super().__init__(self.directory / f"{pod}{JOURNAL_SUFFIX}")

    def _reset(self) -> None:
        super()._reset()
        self._tails: dict[str, JournalTail] = {}

    # --- reading ----------------------------------------------------------------------------------

    def _read_new_lines(self) -> list[tuple[float, Lesson]]:
        """New lines of our journal and every other pod's, newest per id kept; called by `load`,
        `refresh` and `record` (under the index lock), so all three see the fleet."""
        entries = super()._read_new_lines()
        for name in self._other_journals():
            tail = self._tails.get(name)
            if tail is None:
                tail = self._tails[name] = JournalTail(self.directory / name)
            entries.extend(self._read_tail(tail))
        latest: dict[str, tuple[float, Lesson]] = {}
        for seen_at, lesson in entries:
            kept = latest.get(lesson.id)
            if kept is None or seen_at >= kept[0]:
                latest[lesson.id] = (seen_at, lesson)
        fresh = []
        for seen_at, lesson in latest.values():
            idx = self._by_id.get(lesson.id)
            if idx is None or seen_at >= self._rows[idx].seen_at:
                fresh.append((seen_at, lesson))
        return fresh

    def _other_journals(self) -> list[str]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        own = self.path.name if self.path else ""
        return sorted(n for n in names
                      if n.endswith(JOURNAL_SUFFIX) and n != own and not n.startswith("."))

    def _read_tail(self, tail: JournalTail) -> list[tuple[float, Lesson]]:
        try:
            with open(tail.path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < tail.offset:  # replaced or cut: read it again from the top
                    tail.offset = tail.line_no = 0
                if size == tail.offset:
                    return []
                handle.seek(tail.offset)
                data = handle.read(size - tail.offset)
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1  # a line still being written is left for next time
        if end == 0:
            return []
        tail.offset += end
        chunk = data[:end]
        count = chunk.count(b"\n")
        first = tail.line_no + 1
        tail.line_no += count
        numbers: list[int] | range = range(first, first + count)
        decoded = _decode_chunk(chunk, count)
        if decoded is None:
            lines = chunk.split(b"\n")[:-1]
            kept = [(n, line) for n, line in zip(numbers, lines) if line.strip()]
            numbers = [n for n, _ in kept]
            decoded = _decode([line for _, line in kept])
        self._lines_read += len(numbers)
        out = []
        for line_no, item in zip(numbers, decoded):
            try:
                if item is _UNREADABLE:
                    raise ValueError("not JSON")
                out.append(lesson_from_json(item))
            except Exception:  # noqa: BLE001 - a bad line of another pod's is skipped and counted
                tail.malformed += 1
                self._malformed += 1
                if len(tail.malformed_lines) < _REPORTED_MALFORMED:
                    tail.malformed_lines.append(line_no)
        return out

    def refresh(self) -> int:
        """Take in every journal's new lines; returns how many lessons were added or replaced."""
        with self._lock:
            self._next_refresh = time.monotonic() + self.refresh_interval
            new = self._read_new_lines()
            for seen_at, lesson in new:
                self._add(lesson, seen_at)
            return len(new)

    def query(self, q: LessonQuery) -> list[LessonMatch]:
        """Lookups see other pods' lessons within `refresh_interval` (plus the share's lag)."""
        if time.monotonic() >= self._next_refresh:
            self.refresh()
        return super().query(q)

    # --- reporting --------------------------------------------------------------------------------

    def stats(self) -> LessonsStats:
        out = super().stats()
        out.path = str(self.directory)
        return out

    def journals(self) -> dict[str, JournalTail]:
        """Other pods' journals read so far (name -> how far), for diagnostics."""
        with self._lock:
            return {name: JournalTail(t.path, t.offset, t.line_no, t.malformed,
                                      list(t.malformed_lines)) for name, t in self._tails.items()}


def lessons_index_for(settings) -> LessonsIndex:
    """The index a worker uses: journals in a shared folder when one is set (`settings.lessons_dir`
    or TASKFLEET_LESSONS_DIR), else the single file of one host (`settings.lessons_path`)."""
    from taskfleet.core.pod import pod_id

    directory = getattr(settings, "lessons_dir", None) or os.environ.get("TASKFLEET_LESSONS_DIR")
    if directory:
        return JournaledLessonsIndex(Path(directory), getattr(settings, "pod_id", "") or pod_id())
    return LessonsIndex(settings.lessons_path)
