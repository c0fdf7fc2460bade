"""taskfleet: run many git-branch tasks on Temporal, landing their commits in batched pushes."""

from typing import Any

__all__ = ["TaskfleetPlugin", "__version__"]


def __getattr__(name: str) -> Any:
    # Lazy, so `taskfleet.models` and friends import without every activity, and the version is
    # looked up only when asked.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("taskfleet")
        except PackageNotFoundError:  # run from a checkout that was never installed
            return "0+unknown"
    if name == "TaskfleetPlugin":
        from taskfleet.plugin import TaskfleetPlugin

        return TaskfleetPlugin
    raise AttributeError(name)
