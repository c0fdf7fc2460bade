"""The lessons index: past failures from a JSONL file, indexed in the worker's memory.

Built once at worker start; every lookup then costs microseconds: keyed posting lists kept in
recency order (so "best first, at most `limit`" is a walk of `limit` entries), an AND query that
starts from the smallest list, a sorted time index, frequency buckets, and a BM25 token index for
similar failures. Appends are durable (flock, flush, fsync) and shared by every worker process on
the host: each reads only the bytes others appended since it last looked.
"""

from __future__ import annotations

import bisect
import copy
import fcntl
import gc
import heapq
import json
import math
import os
import re
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from operator import attrgetter
from pathlib import Path
from typing import Any

from taskfleet.core.models.lessons import (
    Lesson,
    LessonMatch,
    LessonQuery,
    LessonsStats,
)

KEYED_FIELDS = ("task_type", "activity_type", "failure_type", "pattern")
_LIST_POSTINGS = frozenset({"pattern"})
_LESSON_FIELDS = {f.name for f in fields(Lesson)}
_STRING_FIELDS = _LESSON_FIELDS - {"times_seen", "metadata"}
_FIELD_DEFAULTS = {f.name: f.default for f in fields(Lesson) if f.name != "metadata"}
MAX_LIMIT = 1_000
_REPORTED_MALFORMED = 50

_TMP_PATH = re.compile(r"(?:/tmp|/var/folders|/private/var|/var/tmp)/\S*")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_HEX = re.compile(r"\b(?:0x)?[0-9a-f]{7,64}\b")
_NUMBER = re.compile(r"\b\d+(?:\.\d+)?\b")
_SPACE = re.compile(r"\s+")
_TOKEN = re.compile(r"[a-z_][a-z0-9_]+")
_STOPWORDS = frozenset("the a an in of to at is on for and or by with from was were be not no got".split())
_BM25_K1 = 1.2
_BM25_B = 0.75


class MalformedLesson(ValueError):
    """A line of the lessons file that cannot be a lesson."""


def normalize_pattern(message: str) -> str:
    """The failure with what varies between runs stripped: temp paths, uuids, hashes, numbers."""
    text = message.lower()
    text = _TMP_PATH.sub("<tmp>", text)
    text = _UUID.sub("<uuid>", text)
    text = _HEX.sub("<hex>", text)
    text = _NUMBER.sub("<n>", text)
    return _SPACE.sub(" ", text).strip()[:500]


def tokenize(message: str) -> list[str]:
    return [t for t in _TOKEN.findall(message.lower()) if t not in _STOPWORDS]


def _timestamp(value: str) -> float:
    moment = _fromisoformat(value)
    return (moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)).timestamp()


_fromisoformat = datetime.fromisoformat


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _all_strings(d: dict[str, Any]) -> bool:
    # Unrolled on purpose: called once per line of a 100,000-line build.
    return (
        type(d["id"]) is str and type(d["task_type"]) is str and type(d["activity_type"]) is str
        and type(d["failure_type"]) is str and type(d["failure_msg"]) is str
        and type(d["resolution"]) is str and type(d["pattern"]) is str
        and type(d["first_seen"]) is str and type(d["last_seen"]) is str
    )


# Results are deep copies; a lesson nested hundreds deep would make every query that returns it
# fail with RecursionError, so such a line is malformed.
MAX_METADATA_DEPTH = 32


def _nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether lists/dicts in `value` nest more than `limit` levels (iterative: no recursion)."""
    level: list[Any] = [value]
    for _ in range(limit):
        level = [
            child
            for item in level
            for child in (item.values() if type(item) is dict else item)
            if type(child) is dict or type(child) is list
        ]
        if not level:
            return False
    return True


def lesson_from_json(data: Any) -> tuple[float, Lesson]:
    """Validate one decoded line into (last_seen as epoch seconds, lesson).

    Unknown keys are ignored, so a newer writer's extra fields do not break older readers.
    On the build's hot path: checks are `type() is` tests, each timestamp is parsed once.
    """
    if type(data) is not dict:
        raise MalformedLesson("not a JSON object")
    if data.keys() != _LESSON_FIELDS:
        for name in _LESSON_FIELDS.difference(data):
            data[name] = {} if name == "metadata" else _FIELD_DEFAULTS[name]
        for name in set(data).difference(_LESSON_FIELDS):
            del data[name]
    if not data["id"] or type(data["id"]) is not str:
        raise MalformedLesson("missing 'id'")
    if not _all_strings(data):
        raise MalformedLesson(
            f"{', '.join(n for n in sorted(_STRING_FIELDS) if type(data[n]) is not str)} must be strings"
        )
    times_seen = data["times_seen"]
    if type(times_seen) is not int or times_seen < 1:
        raise MalformedLesson("'times_seen' is not a whole number >= 1")
    if type(data["metadata"]) is not dict:
        raise MalformedLesson("'metadata' is not an object")
    if data["metadata"] and _nested_deeper_than(data["metadata"], MAX_METADATA_DEPTH):
        raise MalformedLesson(f"'metadata' nests deeper than {MAX_METADATA_DEPTH} levels")
    # The decoded dict becomes the instance's __dict__: no copy of every field for every line.
    lesson = object.__new__(Lesson)
    lesson.__dict__ = data
    if not lesson.last_seen:
        lesson.last_seen = lesson.first_seen
    if not lesson.last_seen:
        raise MalformedLesson("missing 'last_seen' and 'first_seen'")
    try:
        seen_at = _timestamp(lesson.last_seen)
        if lesson.first_seen and lesson.first_seen != lesson.last_seen:
            _timestamp(lesson.first_seen)
    except ValueError:
        raise MalformedLesson("'first_seen'/'last_seen' is not an ISO-8601 time") from None
    lesson.first_seen = lesson.first_seen or lesson.last_seen
    if not lesson.pattern:
        lesson.pattern = normalize_pattern(lesson.failure_msg)
    return seen_at, lesson


def _decode_chunk(chunk: bytes, count: int) -> list[Any] | None:
    """All lines of `chunk` (each ending in a newline) as one JSON array, or None if any line is
    blank or not exactly one JSON value."""
    if not count or chunk.startswith(b"\n") or b"\n\n" in chunk:
        return None
    try:
        decoded = json.loads(b"[" + chunk[:-1].replace(b"\n", b",") + b"]")
    except (ValueError, RecursionError):  # deep nesting raises RecursionError, not ValueError
        return None
    return decoded if len(decoded) == count else None


def _decode(lines: list[bytes]) -> list[Any]:
    """Decode JSON lines, all in one call when every line is sound, line by line otherwise."""
    try:
        decoded = json.loads(b"[" + b",".join(lines) + b"]")
        if len(decoded) == len(lines):
            return decoded
    except (ValueError, RecursionError):
        pass
    out: list[Any] = []
    for raw in lines:
        try:
            out.append(json.loads(raw))
        except Exception:  # any line the decoder refuses (bad JSON, nested too deep) is unreadable
            out.append(_UNREADABLE)
    return out


_UNREADABLE = object()


def _copy(lesson: Lesson) -> Lesson:
    """Callers get copies: nothing they do to a result can corrupt the index."""
    out = copy.copy(lesson)
    out.metadata = copy.deepcopy(lesson.metadata) if lesson.metadata else {}
    return out


@dataclass(slots=True)
class _Row:
    lesson: Lesson
    seen_at: float
    norm: float = 1.0  # BM25 length normalisation of failure_msg


class LessonsIndex:
    """Thread-safe: activities may query from the event loop while a recording thread writes."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path else None
        self._lock = threading.RLock()
        self._reset()

    def _reset(self) -> None:
        self._rows: list[_Row] = []
        self._by_id: dict[str, int] = {}
        self._by_key: dict[tuple[str, str, str, str], int] | None = {}
        self._postings: dict[str, dict[str, dict[int, None]]] = {name: {} for name in KEYED_FIELDS}
        self._times: list[tuple[float, int]] = []
        self._by_count: dict[int, dict[int, None]] | None = {}
        self._counts: list[int] = []
        # token -> ids of lessons whose failure_msg has it (an id repeats when the token does)
        self._terms: dict[str, list[int]] = {}
        self._term_counts: dict[str, dict[int, int]] = {}  # id -> tf, made on demand for common terms
        self._doc_lengths: list[int] = []
        self._avg_length = 1.0
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
        gc.disable()  # a build makes ~10 objects a line; generational passes over them cost ~30%
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
            gc.freeze()  # the index lives as long as the worker: keep it out of every later GC pass

    def _read_new_lines(self) -> list[tuple[float, Lesson]]:
        """Complete lines appended since `_offset`; later lines with a known id replace earlier ones."""
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
        decoded = _decode_chunk(chunk, count)
        if decoded is None:  # a blank or broken line: go line by line
            lines = chunk.split(b"\n")[:-1]
            kept = [(n, line) for n, line in zip(numbers, lines) if line.strip()]
            numbers, lines = [n for n, _ in kept], [line for _, line in kept]
            decoded = _decode(lines)
        self._lines_read += len(numbers)
        for line_no, item in zip(numbers, decoded):
            try:
                if item is _UNREADABLE:
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
        """Pick up lines other processes appended (reads only the new bytes). Returns how many."""
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

    def _bulk_add(self, lessons: list[tuple[float, Lesson]]) -> None:
        """Fill an empty index from distinct lessons sorted by time, a column at a time.

        The same structures `_add` keeps, but built with list appends and C-level conversions
        (`dict.fromkeys`, `Counter`) instead of one dict insert per field per lesson.
        """
        assert not self._rows, "bulk build needs an empty index"
        rows = [_Row(lesson, seen_at) for seen_at, lesson in lessons]
        self._rows = rows
        only = [row.lesson for row in rows]
        self._by_id = dict(zip((lesson.id for lesson in only), range(len(only))))
        self._by_key = None  # the write path's dedup map: made on the first record()
        for name in KEYED_FIELDS:
            grouped: defaultdict[str, list[int]] = defaultdict(list)
            for idx, value in enumerate(map(attrgetter(name), only)):
                grouped[value].append(idx)
            # Patterns are nearly unique: their lists stay lists (a dict each would cost ~10% of a build).
            self._postings[name] = dict(grouped) if name in _LIST_POSTINGS else {
                value: dict.fromkeys(ids) for value, ids in grouped.items()
            }
        self._times = list(zip((seen_at for seen_at, _ in lessons), range(len(lessons))))
        self._times.sort()
        self._by_count = None  # frequency buckets: made on the first "most frequent" query
        occurrences: dict[str, list[int]] = {}
        appenders: dict[str, Callable[[int], None]] = {}  # bound `append`s: no lookup per token
        lengths = []
        findall = _TOKEN.findall
        for idx, lesson in enumerate(only):
            tokens = findall(lesson.failure_msg.lower())
            lengths.append(len(tokens))
            for token in tokens:
                try:
                    appenders[token](idx)
                except KeyError:
                    occurrences[token] = ids = [idx]
                    appenders[token] = ids.append
        for stopword in _STOPWORDS:
            occurrences.pop(stopword, None)
        self._terms = dict(occurrences)
        self._term_counts = {}
        self._doc_lengths = lengths

    def _add(self, lesson: Lesson, seen_at: float) -> None:
        """Insert, or replace the lesson with the same id (moving it to the recent end of lists)."""
        idx = self._by_id.get(lesson.id)
        if idx is not None:
            previous = self._rows[idx].lesson
            self._remove_from_indexes(idx)
            if self._by_key is not None and self._by_key.get(self._dedup_key(previous)) == idx:
                del self._by_key[self._dedup_key(previous)]
            self._rows[idx] = _Row(lesson, seen_at)
            if previous.failure_msg != lesson.failure_msg:
                for token in set(tokenize(previous.failure_msg)):
                    self._terms[token] = [i for i in self._terms[token] if i != idx]
                    self._term_counts.pop(token, None)
                self._index_tokens(idx, lesson.failure_msg)
        else:
            idx = len(self._rows)
            self._rows.append(_Row(lesson, seen_at))
            self._by_id[lesson.id] = idx
            self._doc_lengths.append(0)
            self._index_tokens(idx, lesson.failure_msg)
        self._rows[idx].norm = self._norm(self._doc_lengths[idx])
        for name in KEYED_FIELDS:
            if name in _LIST_POSTINGS:
                self._postings[name].setdefault(getattr(lesson, name), []).append(idx)
            else:
                self._postings[name].setdefault(getattr(lesson, name), {})[idx] = None
        bisect.insort(self._times, (seen_at, idx))
        if self._by_count is not None:
            bucket = self._by_count.get(lesson.times_seen)
            if bucket is None:
                bucket = self._by_count[lesson.times_seen] = {}
                bisect.insort(self._counts, lesson.times_seen)
            bucket[idx] = None
        if self._by_key is not None:
            self._by_key[self._dedup_key(lesson)] = idx

    def _index_tokens(self, idx: int, message: str) -> None:
        """Doc length counts every token, stopwords included, as `_bulk_add` does."""
        everything = _TOKEN.findall(message.lower())
        tokens = [t for t in everything if t not in _STOPWORDS]
        for token in tokens:
            postings = self._terms.get(token)
            if postings is None:
                self._terms[token] = [idx]
            else:
                postings.append(idx)
            counts = self._term_counts.get(token)
            if counts is not None:
                counts[idx] = counts.get(idx, 0) + 1
        self._doc_lengths[idx] = len(everything)

    def _remove_from_indexes(self, idx: int) -> None:
        row = self._rows[idx]
        for name in KEYED_FIELDS:
            posting = self._postings[name][getattr(row.lesson, name)]
            if isinstance(posting, list):
                if idx in posting:
                    posting.remove(idx)
            else:
                posting.pop(idx, None)
        at = bisect.bisect_left(self._times, (row.seen_at, idx))
        if at < len(self._times) and self._times[at] == (row.seen_at, idx):
            del self._times[at]
        if self._by_count is not None:
            bucket = self._by_count[row.lesson.times_seen]
            bucket.pop(idx, None)
            if not bucket:
                del self._by_count[row.lesson.times_seen]
                self._counts.remove(row.lesson.times_seen)

    def _frequency_buckets(self) -> dict[int, dict[int, None]]:
        if self._by_count is None:
            grouped: defaultdict[int, list[int]] = defaultdict(list)
            for idx, row in enumerate(self._rows):
                grouped[row.lesson.times_seen].append(idx)
            self._by_count = {count: dict.fromkeys(ids) for count, ids in grouped.items()}
            self._counts = sorted(self._by_count)
        return self._by_count

    @staticmethod
    def _dedup_key(lesson: Lesson) -> tuple[str, str, str, str]:
        return (lesson.task_type, lesson.activity_type, lesson.failure_type, lesson.pattern)

    def _norm(self, length: int) -> float:
        return _BM25_K1 * (1 - _BM25_B + _BM25_B * length / self._avg_length)

    def _recompute_norms(self) -> None:
        if self._doc_lengths:
            self._avg_length = max(sum(self._doc_lengths) / len(self._doc_lengths), 1.0)
        for idx, row in enumerate(self._rows):
            row.norm = self._norm(self._doc_lengths[idx])

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
                    self._by_key = {self._dedup_key(row.lesson): i for i, row in enumerate(self._rows)}
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
                self._add(stored, _timestamp(stored.last_seen))
                return _copy(stored)
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # --- lookups --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, lesson_id: str) -> Lesson | None:
        with self._lock:
            idx = self._by_id.get(lesson_id)
            return None if idx is None else _copy(self._rows[idx].lesson)

    def find(self, field: str, value: str, limit: int = 20) -> list[Lesson]:
        """Lessons whose `field` equals `value`, most recently seen first."""
        return [m.lesson for m in self.query(LessonQuery(**{field: value, "limit": limit}))]

    def query(self, q: LessonQuery) -> list[LessonMatch]:
        """AND of every field given; ranked by BM25 (`similar_to`), frequency, or recency."""
        limit = max(0, min(q.limit, MAX_LIMIT))
        after = _timestamp(q.seen_after) if q.seen_after else None
        before = _timestamp(q.seen_before) if q.seen_before else None
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
                ranked = ((idx, 0.0) for idx in self._matching(reversed(lists[0]), lists[1:], after, before))
            else:
                ranked = ((idx, 0.0) for idx in self._in_range(after, before))
            return [LessonMatch(_copy(self._rows[idx].lesson), score) for idx, score in _take(ranked, limit)]

    def _matching(
        self, candidates: Iterable[int], others: list[dict[int, None]], after: float | None, before: float | None
    ) -> Iterator[int]:
        ranged = after is not None or before is not None
        if len(others) == 1 and not ranged:
            only = others[0]
            yield from (idx for idx in candidates if idx in only)
            return
        for idx in candidates:
            for other in others:
                if idx not in other:
                    break
            else:
                if not ranged or self._within(idx, after, before):
                    yield idx

    def _within(self, idx: int, after: float | None, before: float | None) -> bool:
        seen_at = self._rows[idx].seen_at
        return (after is None or seen_at >= after) and (before is None or seen_at <= before)

    def _in_range(self, after: float | None, before: float | None) -> Iterator[int]:
        """Newest first, through the sorted time index."""
        lo = 0 if after is None else bisect.bisect_left(self._times, (after, -1))
        hi = len(self._times) if before is None else bisect.bisect_right(self._times, (before, math.inf))
        for at in range(hi - 1, lo - 1, -1):
            yield self._times[at][1]

    def _most_frequent(
        self, lists: list[dict[int, None]], after: float | None, before: float | None, limit: int
    ) -> Iterator[tuple[int, float]]:
        if lists:
            found = self._matching(lists[0], lists[1:], after, before)
            top = heapq.nlargest(limit, found, key=lambda idx: self._rows[idx].lesson.times_seen)
            yield from ((idx, float(self._rows[idx].lesson.times_seen)) for idx in top)
            return
        buckets = self._frequency_buckets()
        for count in reversed(self._counts):
            for idx in reversed(buckets[count]):
                if self._within(idx, after, before):
                    yield idx, float(count)

    def _similar(
        self, text: str, lists: list[dict[int, None]], after: float | None, before: float | None, limit: int
    ) -> list[tuple[int, float]]:
        """BM25 over failure_msg tokens, rarest terms first.

        Terms in more than 1% of lessons only re-score candidates the rarer terms found (they
        would add a little to everything and cost a walk of a long list), unless nothing rarer matched.
        """
        total = len(self._rows)
        terms = sorted((len(self._terms[t]), t) for t in set(tokenize(text)) if t in self._terms)
        common = max(256, total // 100)
        scores: dict[int, float] = {}
        rows = self._rows
        saturation = _BM25_K1 + 1
        for df, token in terms:
            idf = math.log(1 + (total - df + 0.5) / (df + 0.5))
            if df > common and scores:
                counts = self._term_counts.get(token)
                if counts is None:
                    counts = self._term_counts[token] = dict(Counter(self._terms[token]))
                for idx in scores:
                    tf = counts.get(idx)
                    if tf:
                        scores[idx] += idf * tf * saturation / (tf + rows[idx].norm)
                continue
            # A repeated id adds its term again: tf counted by repetition, close enough to BM25.
            for idx in self._terms[token]:
                scores[idx] = scores.get(idx, 0.0) + idf * saturation / (1 + rows[idx].norm)
        if lists or after is not None or before is not None:
            keep = set(self._matching(scores, lists, after, before))
            scores = {idx: s for idx, s in scores.items() if idx in keep}
        return heapq.nlargest(limit, scores.items(), key=lambda item: item[1])

    def all_lessons(self) -> Iterator[Lesson]:
        """Every lesson (copies), for baselines and exports; not for the hot path."""
        with self._lock:
            rows = list(self._rows)
        for row in rows:
            yield _copy(row.lesson)

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


def _take(items: Iterable[tuple[int, float]], limit: int) -> list[tuple[int, float]]:
    out = []
    if limit <= 0:
        return out
    for item in items:
        out.append(item)
        if len(out) >= limit:
            break
    return out
