"""Which run holds which task branches of a clone, so two running boards never share a branch.

Default branches are `task/<id>`, not scoped to a board: two boards with the same ids on one clone
would reset each other's branches and force-push over each other's work. Before any task runs, a
run claims its branches in `<clone's git dir>/taskfleet-claims/` (one small file per branch, under a
lock): a branch claimed by another run that is still RUNNING refuses the new run, naming the holder.
A claim of a run that has finished (or of an earlier run of the same workflow id) is simply taken
over, so nothing needs releasing, and a crash leaves nothing to clean.

The clone may be shared by pods on several hosts, where flock means nothing: the claim activity
passes a `guard`, the clone's lease lock (`LeaseLockWorkflow`), and writes under its fencing token.
Without one (no client at hand) a host-local flock guards the folder.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Optional
from pathlib import Path

from git import Repo
from git.exc import InvalidGitRepositoryError, NoSuchPathError
from taskfleet.activities.support.git_async import FileLocks, Heartbeat, _nothing

from taskfleet.core.models.orchestrator import BranchClaim

IsRunning = Callable[[str, str], Awaitable[bool]]
# folder -> a held lease on it (an object with `check()`), for the time of the claim
Guard = Callable[[Path], AbstractAsyncContextManager[Any]]


class BranchesHeld(Exception):
    """Another running run holds some of these branches; the message names it."""


class NotAClone(Exception):
    pass


def claims_dir(repo_path: str) -> Path:
    try:
        repo = Repo(repo_path)
    except (InvalidGitRepositoryError, NoSuchPathError):
        raise NotAClone(f"{repo_path} is not a git clone on this worker") from None
    try:
        return Path(repo.common_dir).resolve() / "taskfleet-claims"
    finally:
        repo.close()


def _file(folder: Path, branch: str) -> Path:
    return folder / f"{hashlib.sha256(branch.encode()).hexdigest()[:24]}.json"


class BranchClaims:
    def __init__(self) -> None:
        self._locks = FileLocks()

    async def claim(
        self, claim: BranchClaim, is_running: IsRunning, heartbeat: Heartbeat = _nothing, guard: Optional[Guard] = None
    ) -> int:
        """Take the branches for this run, or raise BranchesHeld; how many were taken over."""
        folder = claims_dir(claim.repo)
        folder.mkdir(parents=True, exist_ok=True)
        if guard is not None:
            async with guard(folder) as lease:
                return await self._claim(folder, claim, is_running, heartbeat, lease.check)
        handle = await self._locks.acquire(folder / ".lock", heartbeat)
        try:
            return await self._claim(folder, claim, is_running, heartbeat, _nothing)
        finally:
            self._locks.release(folder / ".lock", handle)

    async def _claim(
        self, folder: Path, claim: BranchClaim, is_running: IsRunning, heartbeat: Heartbeat, check: Callable[[], None]
    ) -> int:
        me = {"workflow_id": claim.workflow_id, "first_run_id": claim.first_run_id}
        holders: dict[tuple[str, str], list[str]] = {}
        for branch in claim.branches:
            try:
                held = json.loads(_file(folder, branch).read_text())
                key = (str(held["workflow_id"]), str(held["first_run_id"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if key != (claim.workflow_id, claim.first_run_id):
                holders.setdefault(key, []).append(branch)
        for (workflow_id, first_run_id), branches in holders.items():
            heartbeat()
            if await is_running(workflow_id, first_run_id):
                more = f" and {len(branches) - 3} more" if len(branches) > 3 else ""
                raise BranchesHeld(
                    f"branch(es) {', '.join(branches[:3])}{more} on {claim.repo} are held by run "
                    f"{workflow_id} (run id {first_run_id}), which is still running; wait for it to "
                    f"finish, cancel it, or give this board other branch names"
                )
        check()  # still the holder of the clone's lease, and no later token has written here
        for branch in claim.branches:
            _file(folder, branch).write_text(json.dumps({"branch": branch, **me}))
        return sum(len(b) for b in holders.values())
