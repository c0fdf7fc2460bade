"""The activity result cache: a task whose inputs have not changed returns its earlier result. An
in-memory LRU bounded by bytes, then SQLite on disk (WAL) so a restarted worker keeps its hits."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def cache_key(**parts: Any) -> str:
    """A stable key over everything that decides a result (sorted JSON, sha256)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class ResultCacheStats:
    hits: int = 0
    misses: int = 0
    memory_entries: int = 0
    memory_bytes: int = 0
    disk_entries: int = 0


class ResultCache:
    def __init__(self, path: Path | str | None, max_memory_bytes: int = 64 * 1024 * 1024) -> None:
        self.path = Path(path) if path else None
        self.max_memory_bytes = max_memory_bytes
        self._memory: OrderedDict[str, str] = OrderedDict()
        self._memory_bytes = 0
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self.hits = 0
        self.misses = 0

    def open(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, value TEXT NOT "
                         "NULL, stored_at REAL NOT NULL)")

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            text = self._memory.get(key)
            if text is not None:
                self._memory.move_to_end(key)
            elif self._db is not None:
                row = self._db.execute("SELECT value FROM results WHERE key = ?", (key,)).fetchone()
                if row is not None:
                    text = row[0]
                    self._remember(key, text)
            if text is None:
                self.misses += 1
                return None
            self.hits += 1
        return json.loads(text)

    def put(self, key: str, value: dict[str, Any]) -> None:
        text = json.dumps(value, sort_keys=True, default=str)
        with self._lock:
            self._remember(key, text)
            if self._db is not None:
                self._db.execute(
                    "INSERT OR REPLACE INTO results (key, value, stored_at) VALUES (?, ?, ?)",
                    (key, text, time.time()),
                )

    def _remember(self, key: str, text: str) -> None:
        old = self._memory.pop(key, None)
        if old is not None:
            self._memory_bytes -= len(old)
        self._memory[key] = text
        self._memory_bytes += len(text)
        while self._memory_bytes > self.max_memory_bytes and len(self._memory) > 1:
            _, evicted = self._memory.popitem(last=False)
            self._memory_bytes -= len(evicted)

    def stats(self) -> ResultCacheStats:
        with self._lock:
            disk = 0
            if self._db is not None:
                disk = self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
            return ResultCacheStats(self.hits, self.misses, len(self._memory),
                                    self._memory_bytes, disk)
