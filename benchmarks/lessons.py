"""Lessons index at 100,000 lessons: build rate, keyed lookup and similar-failure search latency,
and the same similar-failure search done as a linear scan, measured in the same run. Prints JSON."""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import math
import random
import statistics
import tempfile
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

from common import emit

from taskfleet.activities.services.lessons_index import LessonsIndex, normalize_pattern, tokenize
from taskfleet.core.models.lessons import LessonQuery

TASK_TYPES = [f"task_{i}" for i in range(40)]
ACTIVITY_TYPES = ["implement", "plan", "judge", "verify", "land", "codemod", "review", "test"]
FAILURE_TYPES = ["verify_failed", "exec_failed", "timeout", "merge_conflict", "push_rejected"]
TEMPLATES = [
    "AssertionError: expected {n} got {m} in test_{w1}_{w2} ({w1}/{w3}.py:{n})",
    "ModuleNotFoundError: No module named '{w1}_{w2}'",
    "TimeoutError: executor exceeded {n}s while running {w1} on {w2}",
    "CONFLICT (content): Merge conflict in {w1}/{w2}.{ext}",
    "TypeError: {w1}() got an unexpected keyword argument '{w2}'",
    "KeyError: '{w1}' while parsing {w2} board at line {n}",
    "ruff: {w1}/{w2}.py:{n}:{m}: F401 '{w3}' imported but unused",
    "error[E{n}]: cannot find value `{w1}` in module `{w2}`",
    "npm ERR! missing script: {w1} in /tmp/{hex}/package.json",
    "FAILED tests/test_{w1}.py::test_{w2} - ValueError: invalid {w3} {hex}",
]


def vocabulary(rng: random.Random, size: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(size)]


def synthetic_lessons(n: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    words = vocabulary(rng, 5_000)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    # A lessons file is written by appends, so its lines come in time order (a repeat of a failure
    # is a new line at the end); the index is correct for any order, and fastest for this one.
    offsets = sorted(rng.randint(0, 300 * 86_400) for _ in range(n))
    lessons = []
    for i in range(n):
        msg = rng.choice(TEMPLATES).format(n=rng.randint(1, 999), m=rng.randint(1, 999),
                                           w1=rng.choice(words), w2=rng.choice(words),
                                           w3=rng.choice(words), ext=rng.choice(["py", "go", "ts"]),
                                           hex=f"{rng.getrandbits(40):010x}")
        seen = start + timedelta(seconds=offsets[i])
        lessons.append({
            "id": f"lesson-{i}",
            "task_type": rng.choice(TASK_TYPES),
            "activity_type": rng.choice(ACTIVITY_TYPES),
            "failure_type": rng.choice(FAILURE_TYPES),
            "failure_msg": msg,
            "resolution": f"fix {rng.choice(words)}",
            "pattern": normalize_pattern(msg),
            "times_seen": rng.randint(1, 50),
            "first_seen": seen.isoformat(),
            "last_seen": seen.isoformat(),
            "metadata": {"repo": rng.choice(words)},
        })
    return lessons


class LinearScan:
    """The same BM25 ranking without an index: score every lesson, as a baseline."""

    def __init__(self, lessons: list[dict]) -> None:
        self.docs = [(lesson, Counter(tokenize(lesson["failure_msg"]))) for lesson in lessons]
        self.df: Counter = Counter()
        for _, tokens in self.docs:
            self.df.update(tokens.keys())
        self.avg = sum(sum(t.values()) for _, t in self.docs) / len(self.docs)

    def similar(self, text: str, limit: int) -> list[dict]:
        query = set(tokenize(text))
        total = len(self.docs)
        scored = []
        for lesson, tokens in self.docs:
            score = 0.0
            length = sum(tokens.values())
            for token in query:
                tf = tokens.get(token)
                if tf:
                    df = self.df[token]
                    idf = math.log(1 + (total - df + 0.5) / (df + 0.5))
                    score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / self.avg))
            if score:
                scored.append((score, lesson["id"]))
        return heapq.nlargest(limit, scored)


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(math.ceil(p / 100 * len(ordered))) - 1)]


def timed(fn, calls: list) -> list[float]:
    out = []
    for args in calls:
        started = time.perf_counter()
        fn(*args)
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lessons", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--scans", type=int, default=5, help="linear scans to time (each is slow)")
    parser.add_argument("--quick", action="store_true",
                        help="5,000 lessons, 200 queries, 2 scans: seconds")
    args = parser.parse_args()
    if args.quick:
        args.lessons, args.queries, args.scans = 5_000, 200, 2
    rng = random.Random(11)
    lessons = synthetic_lessons(args.lessons)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lessons.jsonl"
        path.write_text("".join(json.dumps(lesson) + "\n" for lesson in lessons))
        builds = []
        index = None
        for _ in range(3):
            # A fresh index each time, as at worker start: tearing down the previous one is not
            # part of a build (it is freed and collected before the clock starts).
            index = None
            gc.collect()
            index = LessonsIndex(path)
            started = time.perf_counter()
            stats = index.load()
            builds.append(time.perf_counter() - started)
        build = statistics.median(builds)

        keyed_calls = [(LessonQuery(task_type=rng.choice(TASK_TYPES), limit=20),)
                       for _ in range(args.queries)]
        and_calls = [
            (LessonQuery(task_type=rng.choice(TASK_TYPES), activity_type=rng.choice(ACTIVITY_TYPES),
                         failure_type=rng.choice(FAILURE_TYPES), limit=20),)
            for _ in range(args.queries)
        ]
        probes = [rng.choice(lessons)["failure_msg"] for _ in range(args.queries)]
        similar_calls = [(LessonQuery(similar_to=text, limit=20),) for text in probes]
        keyed = timed(index.query, keyed_calls)
        anded = timed(index.query, and_calls)
        similar = timed(index.query, similar_calls)
        scan = LinearScan(lessons)
        scanned = timed(lambda text: scan.similar(text, 20), [(t,) for t in probes[: args.scans]])
        # the index and the scan agree on the best match
        agree = sum(
            index.query(LessonQuery(similar_to=t, limit=1))[0].lesson.id == scan.similar(t, 1)[0][1]
            for t in probes[: args.scans]
        )

    emit({
        "quick": args.quick,
        "lessons": stats.lessons,
        "build_seconds": round(build, 3),
        "build_lines_per_second": round(args.lessons / build),
        "keyed_lookup_limit20_ms": {"p50": round(percentile(keyed, 50), 4),
                                    "p99": round(percentile(keyed, 99), 4)},
        "and_query_3_fields_ms": {"p50": round(percentile(anded, 50), 4),
                                  "p99": round(percentile(anded, 99), 4)},
        "similar_search_ms": {"p50": round(percentile(similar, 50), 4),
                              "p99": round(percentile(similar, 99), 4)},
        "linear_scan_similar_ms": {"p50": round(percentile(scanned, 50), 2)},
        "similar_speedup_vs_scan_p50": round(percentile(scanned, 50) / percentile(similar, 50), 1),
        "top_match_agrees_with_scan": f"{agree}/{args.scans}",
    })


if __name__ == "__main__":
    main()
