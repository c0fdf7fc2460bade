"""The lessons index's structures in memory: postings by field, a time index, frequency buckets,
terms. Lookups walk these in recency order (best first, `limit` entries), never the lessons;
filled a column at a time when the index is built, then kept up one lesson at a time. The base of
`LessonsIndex`."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter

from taskfleet.activities.services.lessons_lines import STOPWORDS, TOKEN, tokenize
from taskfleet.activities.services.lessons_ranking import BM25_B, BM25_K1
from taskfleet.core.models.lessons import Lesson

KEYED_FIELDS = ("task_type", "activity_type", "failure_type", "pattern")
_LIST_POSTINGS = frozenset({"pattern"})


@dataclass(slots=True)
class Row:
    lesson: Lesson
    seen_at: float
    norm: float = 1.0  # BM25 length normalisation of failure_msg


class LessonPostings:
    """The structures, and how a lesson enters, moves in and leaves them (callers hold the lock)."""

    def _reset(self) -> None:
        self._rows: list[Row] = []
        self._by_id: dict[str, int] = {}
        self._by_key: dict[tuple[str, str, str, str], int] | None = {}
        self._postings: dict[str, dict[str, dict[int, None]]] = {name: {} for name in KEYED_FIELDS}
        self._times: list[tuple[float, int]] = []
        self._by_count: dict[int, dict[int, None]] | None = {}
        self._counts: list[int] = []
        # token -> ids of lessons whose failure_msg has it (an id repeats when the token does)
        self._terms: dict[str, list[int]] = {}
        # id -> tf, made on demand for common terms
        self._term_counts: dict[str, dict[int, int]] = {}
        self._doc_lengths: list[int] = []
        self._avg_length = 1.0

    def _bulk_add(self, lessons: list[tuple[float, Lesson]]) -> None:
        """Fill an empty index from distinct lessons sorted by time, a column at a time: list
        appends and C-level conversions, not a dict insert per field per lesson as `_add` does."""
        assert not self._rows, "bulk build needs an empty index"
        rows = [Row(lesson, seen_at) for seen_at, lesson in lessons]
        self._rows = rows
        only = [row.lesson for row in rows]
        self._by_id = dict(zip((lesson.id for lesson in only), range(len(only))))
        self._by_key = None  # the write path's dedup map: made on the first record()
        for name in KEYED_FIELDS:
            grouped: defaultdict[str, list[int]] = defaultdict(list)
            for idx, value in enumerate(map(attrgetter(name), only)):
                grouped[value].append(idx)
            # Patterns are nearly unique: their lists stay lists (a dict each costs ~10% of a
            # build).
            self._postings[name] = dict(grouped) if name in _LIST_POSTINGS else {
                value: dict.fromkeys(ids) for value, ids in grouped.items()
            }
        self._times = list(zip((seen_at for seen_at, _ in lessons), range(len(lessons))))
        self._times.sort()
        self._by_count = None  # frequency buckets: made on the first "most frequent" query
        occurrences: dict[str, list[int]] = {}
        appenders: dict[str, Callable[[int], None]] = {}  # bound `append`s: no lookup per token
        lengths = []
        findall = TOKEN.findall
        for idx, lesson in enumerate(only):
            tokens = findall(lesson.failure_msg.lower())
            lengths.append(len(tokens))
            for token in tokens:
                try:
                    appenders[token](idx)
                except KeyError:
                    occurrences[token] = ids = [idx]
                    appenders[token] = ids.append
        for stopword in STOPWORDS:
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
            self._rows[idx] = Row(lesson, seen_at)
            if previous.failure_msg != lesson.failure_msg:
                for token in set(tokenize(previous.failure_msg)):
                    self._terms[token] = [i for i in self._terms[token] if i != idx]
                    self._term_counts.pop(token, None)
                self._index_tokens(idx, lesson.failure_msg)
        else:
            idx = len(self._rows)
            self._rows.append(Row(lesson, seen_at))
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
        everything = TOKEN.findall(message.lower())
        tokens = [t for t in everything if t not in STOPWORDS]
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
        return BM25_K1 * (1 - BM25_B + BM25_B * length / self._avg_length)

    def _recompute_norms(self) -> None:
        if self._doc_lengths:
            self._avg_length = max(sum(self._doc_lengths) / len(self._doc_lengths), 1.0)
        for idx, row in enumerate(self._rows):
            row.norm = self._norm(self._doc_lengths[idx])
