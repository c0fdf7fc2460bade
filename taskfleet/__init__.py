"""taskfleet: run many git-branch tasks on Temporal, landing their commits in batched pushes."""

from taskfleet.plugin import TaskfleetPlugin

__all__ = ["TaskfleetPlugin"]
