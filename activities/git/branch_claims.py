"""Which run holds which task branches of a clone: default branches (`task/<id>`) are not scoped to
a board, so two running boards must not share one. A claim file per branch; a finished run's
claims are taken over (nothing to release), a ledger per run lets stale ones be swept. Writes run
under the clone's lease lock (pods on many hosts), else a host flock."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Optional

from git import Repo
from git.exc import InvalidGitRepositoryError, NoSuchPathError

from taskfleet.activities.git.git_async import FileLocks, Heartbeat, _nothing
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


def _ledger(folder: Path, workflow_id: str, first_run_id: str) -> Path:
    key = hashlib.sha256(f"{workflow_id}\0{first_run_id}".encode()).hexdigest()[:24]
    return folder / LEDGERS / key


LEDGERS = "runs"  # one ledger per run: a JSON line naming the run, then a branch file name a line


class BranchClaims:
    def __init__(self) -> None:
        self._locks = FileLocks()

    async def claim(self, claim: BranchClaim, is_running: IsRunning,
                    heartbeat: Heartbeat = _nothing, guard: Optional[Guard] = None) -> int:
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

    async def _claim(self, folder: Path, claim: BranchClaim, is_running: IsRunning,
                     heartbeat: Heartbeat, check: Callable[[], None]) -> int:
        me = {"workflow_id": claim.workflow_id, "first_run_id": claim.first_run_id}
        running = _Running(is_running, heartbeat)
        await self._sweep(folder, (claim.workflow_id, claim.first_run_id), running, check)
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
            if await running(workflow_id, first_run_id):
                more = f" and {len(branches) - 3} more" if len(branches) > 3 else ""
                raise BranchesHeld(
                    f"branch(es) {', '.join(branches[:3])}{more} on {claim.repo} are held by run "
                    f"{workflow_id} (run id {first_run_id}), which is still running; wait for it "
                    "to finish, cancel it, or give this board other branch names")
        check()  # still the holder of the clone's lease, and no later token has written here
        ledger = _ledger(folder, claim.workflow_id, claim.first_run_id)
        ledger.parent.mkdir(exist_ok=True)
        # first the ledger: a file it does not list could never be swept
        with open(ledger, "a") as out:
            if out.tell() == 0:
                out.write(json.dumps(me) + "\n")
            out.writelines(_file(folder, branch).name + "\n" for branch in claim.branches)
        for branch in claim.branches:
            _file(folder, branch).write_text(json.dumps({"branch": branch, **me}))
        return sum(len(b) for b in holders.values())

    async def _sweep(self, folder: Path, me: tuple[str, str], running: _Running,
                     check: Callable[[], None]) -> None:
        """Remove the claims of runs that are no longer running (under the clone's lease)."""
        ledgers = folder / LEDGERS
        if not ledgers.is_dir():
            await self._sweep_unledgered(folder, running, check)
            return
        for ledger in sorted(ledgers.iterdir()):
            try:
                lines = ledger.read_text().splitlines()
                owner = json.loads(lines[0])
                key = (str(owner["workflow_id"]), str(owner["first_run_id"]))
            except (OSError, ValueError, KeyError, TypeError, IndexError):
                lines, key = [], ("", "")
            if key == me or (key[0] and await running(*key)):
                continue
            check()
            for name in dict.fromkeys(lines[1:]):
                _remove_if_held(folder / name, key)
            ledger.unlink(missing_ok=True)

    async def _sweep_unledgered(self, folder: Path, running: _Running,
                                check: Callable[[], None]) -> None:
        """A folder from before the ledgers: claims of stopped runs removed, the others put in their
        ledger."""
        by_run: dict[tuple[str, str], list[str]] = {}
        for path in folder.glob("*.json"):
            try:
                held = json.loads(path.read_text())
                by_run.setdefault((str(held["workflow_id"]), str(held["first_run_id"])),
                                  []).append(path.name)
            except (OSError, ValueError, KeyError, TypeError):
                path.unlink(missing_ok=True)
        check()
        (folder / LEDGERS).mkdir(exist_ok=True)
        for key, names in by_run.items():
            if await running(*key):
                with open(_ledger(folder, *key), "a") as out:
                    if out.tell() == 0:
                        out.write(
                            json.dumps({"workflow_id": key[0], "first_run_id": key[1]}) + "\n")
                    out.writelines(name + "\n" for name in names)
            else:
                for name in names:
                    _remove_if_held(folder / name, key)


class _Running:
    """`is_running`, asked once per run within one claim."""

    def __init__(self, is_running: IsRunning, heartbeat: Heartbeat) -> None:
        self.is_running, self.heartbeat = is_running, heartbeat
        self.known: dict[tuple[str, str], bool] = {}

    async def __call__(self, workflow_id: str, first_run_id: str) -> bool:
        key = (workflow_id, first_run_id)
        if key not in self.known:
            self.heartbeat()
            self.known[key] = await self.is_running(workflow_id, first_run_id)
        return self.known[key]


def _remove_if_held(path: Path, key: tuple[str, str]) -> None:
    """Remove a branch file unless another run has taken the branch over since."""
    try:
        held = json.loads(path.read_text())
        if (str(held["workflow_id"]), str(held["first_run_id"])) != key:
            return
    except (OSError, ValueError, KeyError, TypeError):
        pass
    path.unlink(missing_ok=True)
