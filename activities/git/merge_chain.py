"""The merge queue's git work, without a checkout: fetch the target, chain merges, push by
compare-and-swap.

A batch is merged onto the target's tip as fetched from the remote into a private ref of the clone
(`refs/taskfleet/queue/...`; no branch of the clone moves): for each entry, `git merge-tree
--write-tree` on the chain so far and the entry's commit, then `git commit-tree` of a merge commit
(parents: the chain, the entry). The chain's last commit is verified, then pushed with ONE `git
push` that is an exact compare-and-swap: no `+` (fast-forward only) and
`--force-with-lease=<target>:<tip the chain was built on>`. Blocking (run in a thread); one
`Repo` per call (GitPython is not thread-safe). Arguments reach git as argv lists, never through
a shell.
"""

from __future__ import annotations

import time

from git import PushInfo, Repo
from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError
from temporalio.exceptions import ApplicationError

from taskfleet.activities.git.git_op_application import commit_env, ref_commit
from taskfleet.core.models.merge_queue import (
    MERGE_CONFLICT,
    MERGE_IN_TARGET,
    MERGE_MERGED,
    MERGE_REFUSED,
    PUSH_LANDED,
    PUSH_MOVED,
    BuildInput,
    BuildOutput,
    EntryMerge,
    PushInput,
    PushOutput,
    QueueEntry,
)

QUEUE_TRAILER = "Taskfleet-Queue-Entry"
LOCK_TRIES = 6
_FAILED_FLAGS = (PushInfo.ERROR | PushInfo.REJECTED | PushInfo.REMOTE_REJECTED
                 | PushInfo.REMOTE_FAILURE)


def _not_a_clone(message: str) -> ApplicationError:
    # Nothing a retry can fix: the queue answers the batch's entries with this reason.
    return ApplicationError(message, type="QueueCannotLand", non_retryable=True)


def open_clone(path: str, remote: str) -> Repo:
    try:
        repo = Repo(path)
    except (InvalidGitRepositoryError, NoSuchPathError):
        raise _not_a_clone(f"repo {path} is not a git clone on this worker") from None
    if remote not in [r.name for r in repo.remotes]:
        repo.close()
        raise _not_a_clone(f"repo {path} has no remote {remote!r}")
    return repo


def fetch_target(repo: Repo, remote: str, target: str, private_ref: str) -> str:
    """The target's tip on the remote, fetched into `private_ref`. `--refmap=`: the clone's own
    `refs/remotes/` are left alone (parallel builds and the push would race for their locks); a
    lock another build of the queue holds a moment is waited out."""
    for attempt in range(LOCK_TRIES):
        try:
            repo.git.fetch("--quiet", "--no-tags", "--no-write-fetch-head", "--refmap=", remote,
                           f"+refs/heads/{target}:{private_ref}")
            break
        except GitCommandError as err:
            detail = (err.stderr or str(err)).strip()
            if "couldn't find remote ref" in detail:
                raise _not_a_clone(f"target branch {target} does not exist on {remote}") from None
            if "cannot lock ref" not in detail or attempt == LOCK_TRIES - 1:
                raise ApplicationError(f"git fetch of {target} from {remote} failed: {detail}",
                                       type="FetchFailed") from None
            time.sleep(0.02 * 2 ** attempt)
    tip = ref_commit(repo, private_ref)
    if not tip:
        raise ApplicationError(f"fetched {target} from {remote}, but {private_ref} is not set",
                               type="FetchFailed")
    return tip


def _entry_commit(repo: Repo, remote: str, entry: QueueEntry) -> str | None:
    return (ref_commit(repo, f"refs/heads/{entry.branch}")
            or ref_commit(repo, f"refs/remotes/{remote}/{entry.branch}"))


def _is_ancestor(repo: Repo, commit: str, of: str) -> bool:
    status, _, _ = repo.git.merge_base("--is-ancestor", commit, of, with_exceptions=False,
                                       with_extended_output=True)
    return status == 0


def _merges_cleanly(repo: Repo, base: str, commit: str) -> bool:
    status, _, _ = repo.git.merge_tree("--write-tree", "--no-messages", base, commit,
                                       with_exceptions=False, with_extended_output=True)
    return status == 0


def merge_entry(repo: Repo, remote: str, target: str, tip: str, chain: tuple[str, str],
                entry: QueueEntry, env: dict[str, str]) -> tuple[EntryMerge, tuple[str, str]]:
    """Merge one entry onto the chain (its head commit and tree, built on `tip`); its fate and the
    chain after it. Two git processes in the common case: `merge-tree` and `commit-tree`."""
    current, current_tree = chain
    actual = _entry_commit(repo, remote, entry)
    if actual is None:
        return (EntryMerge(entry.id, MERGE_REFUSED,
                           f"branch {entry.branch} does not exist in {repo.working_dir}"), chain)
    if actual != entry.expect_commit:
        return (EntryMerge(entry.id, MERGE_REFUSED, (
            f"branch {entry.branch} is at {actual} in the clone, not at the expected commit "
            f"{entry.expect_commit}: it moved after the entry was sent; send it again with its new "
            "commit")), chain)
    status, out, err = repo.git.merge_tree("--write-tree", "--name-only", "--no-messages", current,
                                           entry.expect_commit, with_exceptions=False,
                                           with_extended_output=True)
    if status == 1:
        files = sorted({line for line in out.splitlines()[1:] if line.strip()})
        alone = current != tip and _merges_cleanly(repo, tip, entry.expect_commit)
        where = f"{target} with the entries ahead of it" if alone else target
        return (EntryMerge(entry.id, MERGE_CONFLICT, (
            f"{entry.branch} does not merge onto {where}: conflicts in "
            f"{', '.join(files[:20]) or '(unknown)'}"
            + (f" and {len(files) - 20} more" if len(files) > 20 else "")), files=files[:200],
                           with_batch=alone), chain)
    if status != 0:
        return (EntryMerge(entry.id, MERGE_REFUSED,
                           f"git merge-tree failed: {(err or out).strip()[:300]}"), chain)
    tree = out.splitlines()[0].strip()
    if tree == current_tree:
        # It adds nothing to the chain: most often it is in the target already (an earlier push of
        # this batch landed before its worker died) or in an entry ahead of it.
        if _is_ancestor(repo, entry.expect_commit, tip):
            return (EntryMerge(entry.id, MERGE_IN_TARGET, f"{entry.branch} is in {target} already"),
                    chain)
        if _is_ancestor(repo, entry.expect_commit, current):
            return EntryMerge(entry.id, MERGE_MERGED, "contained in an entry ahead of it"), chain
    head = repo.git.commit_tree(tree, "-p", current, "-p", entry.expect_commit,
                                "-m", f"Merge branch '{entry.branch}' into {target}",
                                "-m", f"{QUEUE_TRAILER}: {entry.id}", env=env).strip()
    return EntryMerge(entry.id, MERGE_MERGED), (head, tree)


def build_chain(params: BuildInput) -> BuildOutput:
    """Fetch the target, then merge every entry in order onto it, or onto `base` (the merged commit
    of the batch ahead: speculation); entries that cannot merge are left out and say why. The
    chain's head is kept under a private ref until it is pushed or replaced."""
    started = time.monotonic()
    repo = open_clone(params.repo, params.remote)
    try:
        # A batch stacked on another needs the tip only to tell entries already in it: the last
        # one fetched will do (the head of the train fetches it fresh).
        tip = ((params.base and ref_commit(repo, params.queue_ref))
               or fetch_target(repo, params.remote, params.target, params.queue_ref))
        env = commit_env(repo)
        base = params.base or tip
        if params.base and not ref_commit(repo, params.base):
            raise ApplicationError(f"the commit {params.base[:12]} to build {params.batch_id} on "
                                   "is not in the clone", type="FetchFailed")
        chain, merges = (base, repo.git.rev_parse(f"{base}^{{tree}}")), []
        for entry in params.entries:
            try:
                merge, chain = merge_entry(repo, params.remote, params.target,
                                           tip, chain, entry, env)
            except GitCommandError as err:
                detail = (err.stderr or str(err)).strip().splitlines()
                merge = EntryMerge(entry.id, MERGE_REFUSED,
                                   f"git failed on {entry.branch}: {detail[-1] if detail else err}")
            merges.append(merge)
        current = chain[0]
        if current != base:  # keeps the chain's objects reachable until the next batch replaces it
            repo.git.update_ref(params.queue_ref.rsplit("/", 1)[0] + "/candidate", current)
        seconds = time.monotonic() - started
        return BuildOutput(params.batch_id, tip, current, merges, seconds, base=base)
    finally:
        repo.close()


def remote_tip(repo: Repo, remote: str, target: str) -> str:
    """The target's tip on the remote right now ("" when it does not exist)."""
    try:
        out = repo.git.ls_remote(remote, f"refs/heads/{target}")
    except GitCommandError as err:
        raise ApplicationError(f"git ls-remote {remote} failed: {(err.stderr or str(err)).strip()}",
                               type="PushFailed") from None
    for line in out.splitlines():
        sha, _, ref = line.partition("\t")
        if ref == f"refs/heads/{target}":
            return sha
    return ""


def cas_push(params: PushInput, retried: bool) -> PushOutput:
    """Move the target from `expected_tip` to `commit` with one push, or report where it is instead.

    A retried attempt first asks where the target is: if it is the commit already, an earlier
    attempt pushed it (the worker died after the push), and nothing is pushed again.
    """
    started = time.monotonic()
    ref = f"refs/heads/{params.target}"
    repo = open_clone(params.repo, params.remote)
    try:
        if retried:
            tip = remote_tip(repo, params.remote, params.target)
            if tip == params.commit:
                return PushOutput(PUSH_LANDED, tip, pushed=False,
                                  seconds=time.monotonic() - started)
            if tip != params.expected_tip:
                return PushOutput(PUSH_MOVED, tip, seconds=time.monotonic() - started)
        try:
            infos = repo.remote(params.remote).push(f"{params.commit}:{ref}",
                                                    force_with_lease=f"{ref}:{params.expected_tip}")
        except GitCommandError as err:
            # The remote may have taken it and only a local ref's update failed: ask the remote.
            tip = remote_tip(repo, params.remote, params.target)
            if tip == params.commit:
                return PushOutput(PUSH_LANDED, tip, pushed=not retried,
                                  seconds=time.monotonic() - started)
            if tip != params.expected_tip:
                return PushOutput(PUSH_MOVED, tip, seconds=time.monotonic() - started)
            raise ApplicationError(
                f"git push to {params.remote} failed: {(err.stderr or str(err)).strip()}",
                type="PushFailed") from None
        mine = [info for info in infos if info.remote_ref_string == ref]
        if mine and not any(info.flags & _FAILED_FLAGS for info in infos):
            if params.queue_ref:  # the tip the next batches are told apart by; a build may hold it
                repo.git.update_ref(params.queue_ref, params.commit, with_exceptions=False)
            return PushOutput(PUSH_LANDED, params.commit, pushed=True,
                              seconds=time.monotonic() - started)
        # Refused (the lease did not hold, a hook declined it) or nothing reported: where is it now?
        tip = remote_tip(repo, params.remote, params.target)
        if tip == params.commit:
            return PushOutput(PUSH_LANDED, tip, pushed=False, seconds=time.monotonic() - started)
        if tip != params.expected_tip:
            return PushOutput(PUSH_MOVED, tip, seconds=time.monotonic() - started)
        summary = "; ".join((info.summary or "").strip() for info in infos) or "no report"
        raise ApplicationError(f"the remote refused {params.target} at {params.commit[:12]}: "
                               f"{summary}", type="PushDeclined", non_retryable=True)
    finally:
        repo.close()
