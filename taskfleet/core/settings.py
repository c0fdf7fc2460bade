"""Worker-side settings of the plugin (paths of worker-memory services); never on the wire."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from taskfleet.core.names import COORDINATION_TASK_QUEUE
from taskfleet.core.pod import pod_id
from taskfleet.core.task_env import ALLOW_VARIABLE, parse_allow_list


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def _absolute(path: str | os.PathLike[str]) -> Path:
    """`path` made absolute against the current working directory (symlinks kept, `..` folded)."""
    return Path(os.path.abspath(os.path.expanduser(os.fspath(path))))


def _state_dir() -> Path:
    return Path(os.environ.get("TASKFLEET_STATE_DIR", ".taskfleet"))


@dataclass
class TaskfleetSettings:
    """Where the worker keeps its files: `.taskfleet/` (or $TASKFLEET_STATE_DIR) by default."""

    state_dir: Path = field(default_factory=_state_dir)
    # JSONL of past failures (env TASKFLEET_LESSONS_PATH; default <state_dir>/lessons.jsonl)
    lessons_path: Path | None = field(default_factory=lambda: _env_path("TASKFLEET_LESSONS_PATH"))
    # Jinja2 templates compiled at start (env TASKFLEET_TEMPLATES_DIR; default: the shipped ones)
    templates_dir: Path | None = field(default_factory=lambda: _env_path("TASKFLEET_TEMPLATES_DIR"))
    # Pods sharing a clone: each journals its lessons here and reads all (env TASKFLEET_LESSONS_DIR)
    lessons_dir: Path | None = field(default_factory=lambda: _env_path("TASKFLEET_LESSONS_DIR"))
    # This pod's name in journals and worktree names (env TASKFLEET_POD_ID; default: host name)
    pod_id: str = field(default_factory=pod_id)
    # In-memory part of the activity result cache; the rest is SQLite under the state dir.
    result_cache_memory_bytes: int = 64 * 1024 * 1024
    # Worker variables tasks may see: names or patterns (env TASKFLEET_TASK_ENV, "NPM_TOKEN,PIP_*")
    task_env: tuple[str, ...] = field(
        default_factory=lambda: parse_allow_list(os.environ.get(ALLOW_VARIABLE)))
    # How a task's processes die with it: "auto" (a PID namespace where allowed, else process
    # groups), "pid-namespace" or "process-group" (env TASKFLEET_PROCESS_TREES)
    process_trees: str = field(
        default_factory=lambda: os.environ.get("TASKFLEET_PROCESS_TREES") or "auto")
    # The lease locks' queue: every worker polls it, all agree (env TASKFLEET_COORDINATION_QUEUE)
    coordination_task_queue: str = field(
        default_factory=lambda: os.environ.get("TASKFLEET_COORDINATION_QUEUE")
        or COORDINATION_TASK_QUEUE)
    # Claude's prompts, replies and edits, out of workflow history: a folder or s3://BUCKET/PREFIX
    # that every worker of a queue sees (env TASKFLEET_PAYLOAD_STORE; default <state_dir>/payloads)
    payload_store: str = field(
        default_factory=lambda: os.environ.get("TASKFLEET_PAYLOAD_STORE", ""))

    def __post_init__(self) -> None:
        # Absolute once: relative, git and the executor would resolve it inside users' repositories.
        self.state_dir = _absolute(self.state_dir)
        self.lessons_path = (_absolute(self.lessons_path) if self.lessons_path
                             else self.state_dir / "lessons.jsonl")
        if self.lessons_dir is not None:
            self.lessons_dir = _absolute(self.lessons_dir)
        if self.templates_dir is not None:
            self.templates_dir = _absolute(self.templates_dir)
        self.task_env = parse_allow_list(self.task_env)  # a string or a list, checked

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
    def payloads_dir(self) -> Path:
        """The payload store's folder when TASKFLEET_PAYLOAD_STORE names none."""
        return self.state_dir / "payloads"

    @property
    def result_cache_path(self) -> Path:
        return self.state_dir / "result-cache.sqlite"
