"""The lessons index: past failures from a JSONL file, indexed in the worker's memory at start so a
lookup costs microseconds (structures in lessons_postings.py, rankings in lessons_ranking.py,
lines in lessons_lines.py). Appends are durable (flock, fsync) and shared by the host's worker
processes, each reading only the bytes others appended since it last looked."""

from __future__ import annotations

import copy
import fcntl
import gc
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from taskfleet.activities.services.lessons_lines import (
    MAX_METADATA_DEPTH,
    UNREADABLE,
    MalformedLesson,
    copy_lesson,
    decode_chunk,
    decode_lines,
    lesson_from_json,
    normalize_pattern,
    now_iso,
    timestamp,
    tokenize,
)
from taskfleet.activities.services.lessons_postings import KEYED_FIELDS, LessonPostings
from taskfleet.activities.services.lessons_ranking import LessonRanking, take
from taskfleet.core.models.lessons import (
    Lesson,
    LessonMatch,
    LessonQuery,
    LessonsStats,
)

# Importable from here too: the journals, the lessons activities and the judge use them.
_UNREADABLE, _decode, _decode_chunk, _timestamp = UNREADABLE, decode_lines, decode_chunk, timestamp
__all__ = ["KEYED_FIELDS", "MAX_LIMIT", "MAX_METADATA_DEPTH", "LessonsIndex", "MalformedLesson",
           "lesson_from_json", "normalize_pattern", "now_iso", "tokenize"]

MAX_LIMIT = 1_000
_REPORTED_MALFORMED = 50


class LessonsIndex(LessonPostings, LessonRanking):
    """Thread-safe: activities may query from the event loop while a recording thread writes."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path else None
        self._lock = threading.RLock()
        self._reset()

    def _reset(self) -> None:
        super()._reset()
        self._offset = 0
        self._line_no = 0
        self._lines_read = 0
        self._malformed = 0
        self._malformed_lines: list[int] = []
        self._build_seconds = 0.0

    # --- building -------------------------------------------------------------------------------

    def load(self) -> LessonsStats:
        """(Re)build from the file; a missing file is an empty index."""
        started = time.perf_counter()
        collecting = gc.isenabled()
        gc.disable()  # ~10 objects a line: generational passes cost ~30%
        try:
            with self._lock:
                self._reset()
                lessons = self._read_new_lines()
                lessons.sort(key=lambda pair: pair[0])  # oldest first: lists end with the newest
                self._bulk_add(lessons)
                self._recompute_norms()
                self._build_seconds = time.perf_counter() - started
                return self.stats()
        finally:
            if collecting:
                gc.enable()
            gc.freeze()  # the index lives as long as the worker: out of every later GC pass

    def _read_new_lines(self) -> list[tuple[float, Lesson]]:
        """Complete lines since `_offset`; a later line of a known id replaces the earlier."""
        if self.path is None or not self.path.exists():
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self._offset)
            data = handle.read()
        end = data.rfind(b"\n") + 1  # a line still being written is left for next time
        if end == 0:
            return []
        self._offset += end
        latest: dict[str, tuple[float, Lesson]] = {}
        updates: list[tuple[float, Lesson]] = []
        chunk = data[:end]
        count = chunk.count(b"\n")
        first_line = self._line_no + 1
        self._line_no += count
        numbers: range | list[int] = range(first_line, first_line + count)
        decoded = decode_chunk(chunk, count)
        if decoded is None:  # a blank or broken line: go line by line
            lines = chunk.split(b"\n")[:-1]
            kept = [(n, line) for n, line in zip(numbers, lines) if line.strip()]
            numbers, lines = [n for n, _ in kept], [line for _, line in kept]
            decoded = decode_lines(lines)
        self._lines_read += len(numbers)
        for line_no, item in zip(numbers, decoded):
            try:
                if item is UNREADABLE:
                    raise MalformedLesson("not JSON")
                entry = lesson_from_json(item)
            except Exception:  # whatever is wrong with one line, it is skipped and counted
                self._malformed += 1
                if len(self._malformed_lines) < _REPORTED_MALFORMED:
                    self._malformed_lines.append(line_no)
                continue
            if entry[1].id in self._by_id:
                updates.append(entry)
            else:
                latest[entry[1].id] = entry
        return list(latest.values()) + updates

    def refresh(self) -> int:
        """Pick up lines other processes appended (only the new bytes); how many."""
        if self.path is None:
            return 0
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return 0
        if size <= self._offset:
            return 0
        with self._lock:
            new = self._read_new_lines()
            for seen_at, lesson in new:
                self._add(lesson, seen_at)
            return len(new)

    # --- writing --------------------------------------------------------------------------------

    def record(self, lesson: Lesson) -> Lesson:
        """Append durably, or bump `times_seen`/`last_seen` of the same failure seen before."""
        if self.path is None:
            raise ValueError("this lessons index has no file to record into")
        incoming = copy.copy(lesson)
        incoming.pattern = normalize_pattern(incoming.pattern or incoming.failure_msg)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, open(self.path, "ab") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # other worker processes on this host append too
            try:
                for seen_at, other in self._read_new_lines():
                    self._add(other, seen_at)
                stamp = now_iso()
                if self._by_key is None:
                    self._by_key = {self._dedup_key(row.lesson): i
                                    for i, row in enumerate(self._rows)}
                existing = self._by_key.get(self._dedup_key(incoming))
                if existing is not None:
                    stored = copy.copy(self._rows[existing].lesson)
                    stored.times_seen += 1
                    stored.last_seen = stamp
                    stored.resolution = incoming.resolution or stored.resolution
                    stored.metadata = {**stored.metadata, **incoming.metadata}
                    stored.failure_msg = incoming.failure_msg or stored.failure_msg
                else:
                    stored = incoming
                    stored.id = stored.id or uuid.uuid4().hex
                    stored.times_seen = max(stored.times_seen, 1)
                    stored.first_seen = stored.first_seen or stamp
                    stored.last_seen = stamp
                line = json.dumps(asdict(stored), separators=(",", ":")) + "\n"
                handle.write(line.encode())
                handle.flush()
                os.fsync(handle.fileno())
                self._offset = handle.tell()
                self._line_no += 1
                self._lines_read += 1
                self._add(stored, timestamp(stored.last_seen))
                return copy_lesson(stored)
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # --- lookups --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, lesson_id: str) -> Lesson | None:
        with self._lock:
            idx = self._by_id.get(lesson_id)
            return None if idx is None else copy_lesson(self._rows[idx].lesson)

    def find(self, field: str, value: str, limit: int = 20) -> list[Lesson]:
        """Lessons whose `field` equals `value`, most recently seen first."""
        return [m.lesson for m in self.query(LessonQuery(**{field: value, "limit": limit}))]

    def query(self, q: LessonQuery) -> list[LessonMatch]:
        """AND of every field given; ranked by BM25 (`similar_to`), frequency, or recency."""
        limit = max(0, min(q.limit, MAX_LIMIT))
        after = timestamp(q.seen_after) if q.seen_after else None
        before = timestamp(q.seen_before) if q.seen_before else None
        with self._lock:
            lists = []
            for name in KEYED_FIELDS:
                value = getattr(q, name)
                if value:
                    if name == "pattern":
                        value = normalize_pattern(value)
                    posting = self._postings[name].get(value)
                    if not posting:
                        return []
                    lists.append(posting)
            lists.sort(key=len)
            if q.similar_to:
                ranked = self._similar(q.similar_to, lists, after, before, limit)
            elif q.most_frequent:
                ranked = self._most_frequent(lists, after, before, limit)
            elif lists:
                ranked = ((idx, 0.0) for idx in self._matching(
                    reversed(lists[0]), lists[1:], after, before))
            else:
                ranked = ((idx, 0.0) for idx in self._in_range(after, before))
            return [LessonMatch(copy_lesson(self._rows[idx].lesson), score)
                    for idx, score in take(ranked, limit)]

    def all_lessons(self) -> Iterator[Lesson]:
        """Every lesson (copies), for baselines and exports; not for the hot path."""
        with self._lock:
            rows = list(self._rows)
        for row in rows:
            yield copy_lesson(row.lesson)

    def stats(self) -> LessonsStats:
        with self._lock:
            return LessonsStats(
                lessons=len(self._rows),
                lines_read=self._lines_read,
                malformed_lines=self._malformed,
                malformed_line_numbers=list(self._malformed_lines),
                path=str(self.path or ""),
                build_seconds=round(self._build_seconds, 4),
                task_types=sum(1 for v in self._postings["task_type"].values() if v),
                tokens=len(self._terms),
            )
