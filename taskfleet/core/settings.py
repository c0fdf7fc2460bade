"""Worker-side settings of the plugin (paths of worker-memory services); never sent over the wire."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def _state_dir() -> Path:
    return Path(os.environ.get("TASKFLEET_STATE_DIR", ".taskfleet"))


@dataclass
class TaskfleetSettings:
    """Where the worker keeps its files. Defaults live under `.taskfleet/` (or $TASKFLEET_STATE_DIR)."""

    state_dir: Path = field(default_factory=_state_dir)
    # JSONL of past failures (env TASKFLEET_LESSONS_PATH; default <state_dir>/lessons.jsonl)
    lessons_path: Path | None = field(default_factory=lambda: _env_path("TASKFLEET_LESSONS_PATH"))
    # Jinja2 templates compiled at start (env TASKFLEET_TEMPLATES_DIR; default: the shipped ones)
    templates_dir: Path | None = field(default_factory=lambda: _env_path("TASKFLEET_TEMPLATES_DIR"))
    # In-memory part of the activity result cache; the rest is SQLite under the state dir.
    result_cache_memory_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        self.state_dir = Path(self.state_dir)
        if self.lessons_path is None:
            self.lessons_path = self.state_dir / "lessons.jsonl"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def scratch_dir(self) -> Path:
        """Working folders of tasks that run without a worktree."""
        return self.state_dir / "scratch"

    @property
    def worktrees_dir(self) -> Path:
        return self.state_dir / "worktrees"

    @property
    def result_cache_path(self) -> Path:
        return self.state_dir / "result-cache.sqlite"
