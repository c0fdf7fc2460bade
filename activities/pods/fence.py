"""Fencing tokens, recorded beside the resource they guard: a holder whose lease ended while it ran
is refused (`StaleLease`) once a higher token acted. One O_EXCL marker file per token (no
cross-host lock); lower ones are removed. A new lock history restarts at 1, so a holder passes
the fence's highest token (`min_token`) and the lock grants above it."""

from __future__ import annotations

import os
from pathlib import Path


class StaleLease(RuntimeError):
    """A holder whose token is lower than one already used on the resource: it must stop."""


class Fence:
    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)

    def highest(self) -> int:
        """The highest token that acted on the resource (0: none yet)."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return 0
        return max((int(n) for n in names if n.isdigit()), default=0)

    def check(self, token: int) -> None:
        highest = self.highest()
        if highest > token:
            raise StaleLease(f"fencing token {token} is stale: token {highest} has acted on "
                             f"{self.directory.parent} since")

    def admit(self, token: int) -> None:
        """Record `token` as acting now; `StaleLease` if a higher one has acted already."""
        if token < 1:
            raise StaleLease(f"fencing token {token} is not a granted token")
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(self.directory / f"{token:020d}",
                             os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            pass
        try:
            self.check(token)
        except StaleLease:
            # below the highest: nobody needs it
            (self.directory / f"{token:020d}").unlink(missing_ok=True)
            raise
        # Only markers below our own token go: the highest marker always stays.
        for name in os.listdir(self.directory):
            if name.isdigit() and int(name) < token:
                try:
                    os.unlink(self.directory / name)
                except FileNotFoundError:
                    pass


def clone_fence(git_common_dir: Path | str, name: str) -> Fence:
    """The fence of one guarded resource of a clone, inside the clone's git dir."""
    return Fence(Path(git_common_dir) / "taskfleet" / "fence" / name)
