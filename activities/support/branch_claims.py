"""Which run holds which task branches of a clone, so two running boards never share a branch.

Default branches are `task/<id>`, not scoped to a board: two boards with the same ids on one clone
would reset each other's branches and force-push over each other's work. Before any task runs, a
run claims its branches in `<clone's git dir>/taskfleet-claims/` (one small file per branch, under a
lock): a branch claimed by another run that is still RUNNING refuses the new run, naming the holder.
A claim of a run that has finished (or of an earlier run of the same workflow id) is simply taken
over, so nothing needs releasing, and a crash leaves nothing to clean.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from git import Repo
from git.exc import InvalidGitRepositoryError, NoSuchPathError
from taskfleet.activities.support.git_async import FileLocks, Heartbeat, _nothing

from taskfleet.core.models.orchestrator import BranchClaim

IsRunning = Callable[[str, str], Awaitable[bool]]


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

    async def claim(self, claim: BranchClaim, is_running: IsRunning, heartbeat: Heartbeat = _nothing) -> int:
        """Take the branches for this run, or raise BranchesHeld; how many were taken over."""
        folder = claims_dir(claim.repo)
        folder.mkdir(parents=True, exist_ok=True)
        me = {"workflow_id": claim.workflow_id, "first_run_id": claim.first_run_id}
        handle = await self._locks.acquire(folder / ".lock", heartbeat)
        try:
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
            for branch in claim.branches:
                _file(folder, branch).write_text(json.dumps({"branch": branch, **me}))
            return sum(len(b) for b in holders.values())
        finally:
            self._locks.release(folder / ".lock", handle)
