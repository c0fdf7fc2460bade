"""How the lessons index ranks what matches: by BM25 similarity, by frequency, or by recency. A
query is the AND of its fields' posting lists, walked from the smallest; each ranking yields best
first and stops at `limit`, so a query costs about `limit` entries, not the index's size. A mixin
of `LessonsIndex` over `LessonPostings`' structures."""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from taskfleet.activities.services.lessons_lines import tokenize

BM25_K1 = 1.2
BM25_B = 0.75


class LessonRanking:
    """Candidates and their scores, over the postings (callers hold the index lock)."""

    _rows: list[Any]
    _times: list[tuple[float, int]]
    _counts: list[int]
    _terms: dict[str, list[int]]
    _term_counts: dict[str, dict[int, int]]

    def _matching(self, candidates: Iterable[int], others: list[dict[int, None]],
                  after: float | None, before: float | None) -> Iterator[int]:
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
        hi = (len(self._times) if before is None
              else bisect.bisect_right(self._times, (before, math.inf)))
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

    def _similar(self, text: str, lists: list[dict[int, None]], after: float | None,
                 before: float | None, limit: int) -> list[tuple[int, float]]:
        """BM25 over failure_msg tokens, rarest first; terms in over 1% of lessons only re-score
        what rarer ones found (unless they found nothing), sparing a walk of a long list."""
        total = len(self._rows)
        terms = sorted((len(self._terms[t]), t) for t in set(tokenize(text)) if t in self._terms)
        common = max(256, total // 100)
        scores: dict[int, float] = {}
        rows = self._rows
        saturation = BM25_K1 + 1
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


def take(items: Iterable[tuple[int, float]], limit: int) -> list[tuple[int, float]]:
    out = []
    if limit <= 0:
        return out
    for item in items:
        out.append(item)
        if len(out) >= limit:
            break
    return out
