"""Worker-side settings of the plugin (paths of worker-memory services); never sent over the wire."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def _state_dir() -> Path:
    return Path(os.environ.get("TASKFLEET_STATE_DIR", ".taskfleet"))


@dataclass
class TaskfleetSettings:
    """Where the worker keeps its files. Defaults live under `.taskfleet/` (or $TASKFLEET_STATE_DIR)."""

    state_dir: Path = field(default_factory=_state_dir)

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"
