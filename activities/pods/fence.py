"""Fencing tokens, recorded beside the resource they guard.

A lease can end while its holder still runs (a paused or partitioned pod): the lock then grants a
higher token to someone else. Before each guarded step the holder calls `Fence.admit(token)`: it
records that `token` acted on the resource and refuses (`StaleLease`) when a higher token already
did. Each token is its own marker file, created with O_EXCL, so two writers never overwrite each
other and no cross-host file lock is needed; admitting a token removes every marker below it, so the
folder holds one marker (a few while holders race), not one per token ever issued. This narrows, it
does not close, the window between the check and the step; the lease (renewed well before it ends)
covers the rest.

Across lock histories: a lock whose workflow is new (a dev server restarted in memory, a lock reset
or terminated, another namespace) counts its tokens from 1 again, below what the fence has seen. So
a holder tells the lock the fence's highest token when it asks (`min_token`), and the lock grants
above it: the clone is never bricked, and a holder of an older token is still refused.
"""

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
            raise StaleLease(
                f"fencing token {token} is stale: token {highest} has acted on {self.directory.parent} since"
            )

    def admit(self, token: int) -> None:
        """Record `token` as acting now; `StaleLease` if a higher one has acted already."""
        if token < 1:
            raise StaleLease(f"fencing token {token} is not a granted token")
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(self.directory / f"{token:020d}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            pass
        try:
            self.check(token)
        except StaleLease:
            (self.directory / f"{token:020d}").unlink(missing_ok=True)  # below the highest: nobody needs it
            raise
        # Only markers below our own token go: the highest marker always stays.
        for name in os.listdir(self.directory):
            if name.isdigit() and int(name) < token:
                try:
                    os.unlink(self.directory / name)
                except FileNotFoundError:
                    pass


def clone_fence(git_common_dir: Path | str, name: str) -> Fence:
    """The fence of one guarded resource of a clone, inside the clone's git dir (shared with it)."""
    return Fence(Path(git_common_dir) / "taskfleet" / "fence" / name)
