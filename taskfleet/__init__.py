"""taskfleet: run many git-branch tasks on Temporal, landing their commits in batched pushes."""

from typing import Any

__all__ = ["TaskfleetPlugin"]


def __getattr__(name: str) -> Any:
    # Lazy, so that `taskfleet.models` and friends import without pulling in every activity.
    if name == "TaskfleetPlugin":
        from taskfleet.plugin import TaskfleetPlugin

        return TaskfleetPlugin
    raise AttributeError(name)
