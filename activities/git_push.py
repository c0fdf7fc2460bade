"""The `push_batch` activity: apply a batch's ops in order, then land every touched ref in one push,
then tell the ops' `reply_to` workflows what landed (with `notify`)."""

from __future__ import annotations

import asyncio
import time

from git import PushInfo, Repo
from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from taskfleet.activities.git.git_op_application import Applied, OpFailed, apply_batch, ref_commit
from taskfleet.core.git_objects import resolve
from taskfleet.core.models.git_batch import (
    OUTCOME_FAILED,
    OUTCOME_LANDED,
    OUTCOME_UP_TO_DATE,
    GitOpsLanded,
    OpOutcome,
    PushBatchInput,
    PushBatchOutput,
    outcomes_by_listener,
)
from taskfleet.core.names import ACTIVITY_PUSH_BATCH, SIGNAL_GIT_OPS_LANDED

_FAILED_FLAGS = (PushInfo.ERROR | PushInfo.REJECTED | PushInfo.REMOTE_REJECTED
                 | PushInfo.REMOTE_FAILURE)
# Remote-side races that a second attempt usually clears; the activity's retry policy handles them.
_TRANSIENT_MARKERS = ("failed to lock", "cannot lock ref", "unable to create lock")
# How long one `git_ops_landed` signal may take; a listener not told by then is told by the batcher.
NOTIFY_TIMEOUT_SECONDS = 10.0


def open_repo(path: str, remote: str) -> Repo:
    """The clone the batch lands from; a wrong path or remote is the caller's error: no retry."""
    try:
        repo = Repo(path)
    except (InvalidGitRepositoryError, NoSuchPathError):
        raise ApplicationError(f"repo {path} is not a git clone on this worker; start the batcher "
                               "with the clone's path", type="InvalidRepository",
                               non_retryable=True) from None
    if remote not in [r.name for r in repo.remotes]:
        raise ApplicationError(f"repo {path} has no remote {remote!r} (it has: "
                               f"{', '.join(r.name for r in repo.remotes) or 'none'})",
                               type="InvalidRepository", non_retryable=True)
    return repo


def _push_reason(info: PushInfo) -> str:
    summary = (info.summary or "").strip()
    if info.flags & PushInfo.REMOTE_REJECTED:
        return f"the remote declined {info.remote_ref_string}: {summary}"
    if info.flags & PushInfo.REJECTED:
        return (
            f"push of {info.remote_ref_string} rejected ({summary}); the remote moved: "
            "fetch, rebase and send again"
        )
    return f"push of {info.remote_ref_string} failed: {summary}"


def push_refs(
    repo: Repo, remote: str, refs: list[str], atomic: bool, leased: list[str] | None = None
) -> dict[str, PushInfo]:
    """One `git push` carrying every ref; raises (retryably) only when the push as a whole failed.
    `leased` refs may move non-fast-forward, but only from where this clone last saw them."""
    refspecs = [f"{ref}:{ref}" for ref in refs]
    options: dict = {"atomic": atomic}
    if leased:
        options["force_with_lease"] = [f"{ref}:{_seen_on_remote(repo, remote, ref)}"
                                       for ref in leased]
    try:
        infos = repo.remote(remote).push(refspecs, **options)
    except GitCommandError as err:
        detail = (err.stderr or str(err)).strip()
        raise ApplicationError(f"git push to {remote} failed: {detail}",
                               type="PushFailed") from None
    results = {info.remote_ref_string: info for info in infos}
    for info in infos:
        if (info.flags & _FAILED_FLAGS
                and any(m in (info.summary or "") for m in _TRANSIENT_MARKERS)):
            raise ApplicationError(
                f"remote ref lock race on {info.remote_ref_string}: {info.summary.strip()}",
                type="PushRace",
            )
    return results


def _seen_on_remote(repo: Repo, remote: str, ref: str) -> str:
    """The lease's expected value: the tracking ref, or empty (the ref must not exist yet)."""
    return ref_commit(repo, ref.replace("refs/heads/", f"refs/remotes/{remote}/", 1)) or ""


def pushed_values(repo: Repo, remote: str, infos: dict[str, PushInfo],
                  applied: dict[str, Applied]) -> dict[str, str]:
    """Each pushed ref's value on the remote (an op's `branch_commit`): its tracking ref, checked
    against the summary's `old..new`; else the value sent, if the summary confirms it."""
    ok = {ref: info for ref, info in infos.items() if not info.flags & _FAILED_FLAGS}
    if not ok:
        return {}
    tracking = {ref: ref.replace("refs/heads/", f"refs/remotes/{remote}/", 1) for ref in ok}
    # Read in process (libgit2): not a `git for-each-ref` process per batch.
    where = repo.working_tree_dir or repo.git_dir
    found = {name: value for name in tracking.values() if (value := resolve(where, name))}
    sent = {a.ref: a.commit for a in applied.values()}
    values: dict[str, str] = {}
    for ref, info in ok.items():
        reported = _summary_new(info)
        # Up to date: the remote already holds exactly what was offered.
        value = (sent.get(ref, "") if info.flags & PushInfo.UP_TO_DATE
                 else found.get(tracking[ref]) or sent.get(ref, ""))
        if value and (not reported or value.startswith(reported)):
            values[ref] = value
    return values


def _summary_new(info: PushInfo) -> str:
    """The new value's abbreviation in a porcelain summary (`a..b`, `a...b (forced update)`)."""
    summary = (info.summary or "").strip().split(" ", 1)[0]
    for sep in ("...", ".."):
        if sep in summary:
            return summary.split(sep, 1)[1]
    return ""


def land_batch(params: PushBatchInput) -> PushBatchOutput:
    """Blocking body of the activity (runs in a thread): apply, push once, report per op."""
    started = time.monotonic()
    repo = open_repo(params.repo, params.remote)
    applied: dict[str, Applied] = {}
    failures: dict[str, str] = {}
    refs: list[str] = []
    first_attempt = params.attempt == 1 and activity.info().attempt == 1
    results = apply_batch(params.repo, params.ops, params.remote, first_attempt)
    for op in params.ops:
        result = results[op.id]
        if isinstance(result, OpFailed):
            failures[op.id] = str(result)
            activity.logger.warning("op %s (%s %s) failed: %s", op.id, op.op_type,
                                    op.branch, result)
            continue
        applied[op.id] = result
        if result.ref not in refs:
            refs.append(result.ref)

    leased = sorted({applied[op.id].ref for op in params.ops if op.force and op.id in applied})
    push_results = push_refs(repo, params.remote, refs, params.atomic, leased) if refs else {}
    on_remote = pushed_values(repo, params.remote, push_results, applied)
    outcomes: list[OpOutcome] = []
    for op in params.ops:
        outcome = OpOutcome(op_id=op.id, op_type=op.op_type, branch=op.branch,
                            status=OUTCOME_FAILED)
        if op.id in failures:
            outcome.reason = failures[op.id]
        else:
            done = applied[op.id]
            outcome.ref, outcome.commit = done.ref, done.commit
            info = push_results.get(done.ref)
            if info is None:
                outcome.reason = f"git push reported nothing for {done.ref}"
            elif info.flags & _FAILED_FLAGS:
                outcome.reason = _push_reason(info)
            elif done.ref not in on_remote:
                outcome.reason = (f"git push did not confirm the new value of {done.ref} "
                                  f"(summary {info.summary.strip()!r})")
            else:
                if info.flags & PushInfo.UP_TO_DATE and not done.made_commit:
                    outcome.status = OUTCOME_UP_TO_DATE
                    outcome.reason = done.note or "already on the remote"
                else:
                    outcome.status = OUTCOME_LANDED
                    outcome.reason = done.note
                outcome.branch_commit = done.branch_commit or on_remote[done.ref]
        outcomes.append(outcome)
    return PushBatchOutput(
        batch_id=params.batch_id,
        outcomes=outcomes,
        pushed_refs=refs,
        pushes=1 if refs else 0,
        seconds=time.monotonic() - started,
    )


class GitPushActivities:
    """Git side effects of the batcher. GitPython is not thread-safe: one `Repo` per call."""

    def __init__(self, heartbeat_every: float = 1.0) -> None:
        self.heartbeat_every = heartbeat_every

    @activity.defn(name=ACTIVITY_PUSH_BATCH)
    async def push_batch(self, params: PushBatchInput) -> PushBatchOutput:
        activity.logger.info(
            "landing %s: %d ops on %s (%s), attempt %d",
            params.batch_id,
            len(params.ops),
            params.repo,
            params.remote,
            activity.info().attempt,
        )
        work = asyncio.ensure_future(asyncio.to_thread(land_batch, params))
        while True:
            done, _ = await asyncio.wait({work}, timeout=self.heartbeat_every)
            if done:
                break
            activity.heartbeat(params.batch_id)
        result = work.result()
        if params.notify:
            result.notified = await tell_listeners(params, result)
        landed = sum(1 for o in result.outcomes if o.status != OUTCOME_FAILED)
        activity.logger.info(
            "%s: %d/%d ops landed with %d push(es) in %.2fs",
            params.batch_id,
            landed,
            len(result.outcomes),
            result.pushes,
            result.seconds,
        )
        return result


async def tell_listeners(params: PushBatchInput, result: PushBatchOutput) -> list[str]:
    """Signal `git_ops_landed` to each op's `reply_to` at once; returns the listeners reached. The
    others (gone, failed, slow) are told by the batcher; a listener told twice keeps the first."""
    by_listener = outcomes_by_listener(params.ops, result.outcomes)
    if not by_listener:
        return []
    client = activity.client()

    async def tell(listener: str, outcomes: list[OpOutcome]) -> bool:
        message = GitOpsLanded(params.batch_id, params.repo, params.remote, outcomes)
        try:
            await asyncio.wait_for(client.get_workflow_handle(listener).signal(
                SIGNAL_GIT_OPS_LANDED, message), NOTIFY_TIMEOUT_SECONDS)
        except Exception as err:  # noqa: BLE001 - the batcher tells it instead
            activity.logger.info("could not tell %s about %s (the batcher will): %s", listener,
                                 params.batch_id, err)
            return False
        return True

    told = await asyncio.gather(
        *(tell(listener, outcomes) for listener, outcomes in by_listener.items()))
    return [listener for listener, ok in zip(by_listener, told) if ok]
