"""What a board must pass before the orchestrator runs any of its tasks, each one activity: its base
on the remote, the worker variables its tasks ask for, branches no other running run holds, and (an
inline board) storing it in the clone. A refusal fails the run at once, non-retryable (`BoardError`,
`EnvNotAllowed`, `BranchesHeld`)."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.errors import cause_message, root_cause_message
    from taskfleet.core.models.board_store import REASON_MAX_CHARS, StoreBoardInput
    from taskfleet.core.models.merge_queue import DefaultBranchInput
    from taskfleet.core.models.orchestrator import (
        BranchClaim,
        OrchestratorInput,
        TaskEnvCheck,
        TaskSpec,
    )
    from taskfleet.core.models.paging import BoardReference
    from taskfleet.core.names import (
        ACTIVITY_CHECK_TASK_ENV,
        ACTIVITY_CLAIM_BRANCHES,
        ACTIVITY_DEFAULT_BRANCH,
        ACTIVITY_STORE_BOARD,
    )

from taskfleet.workflows import compat

CLAIM_RETRY = RetryPolicy(maximum_attempts=5, non_retryable_error_types=["BranchesHeld"])
ENV_CHECK_RETRY = RetryPolicy(maximum_attempts=5, non_retryable_error_types=["EnvNotAllowed"])
# The stores are the clone, whose locks clear: no attempt limit; a missing board stays missing.
STORE_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=30),
                          non_retryable_error_types=["BoardStoreError"])
# A board started by hand with inline JSON: up to this much (its tasks then move to the clone).
INLINE_BOARD_MAX_BYTES = 256 * 1024


async def resolve_base(params: OrchestratorInput) -> None:
    """A board that names no base lands on the remote's default branch, asked of the clone (runs
    started before this took "main", as the board's default was then)."""
    board = params.board
    if not compat.base_from_remote():
        board.base = compat.BASE_BEFORE_REMOTE_DEFAULT
        return
    try:
        board.base = await workflow.execute_activity(
            ACTIVITY_DEFAULT_BRANCH, DefaultBranchInput(repo=params.repo, remote=params.remote),
            result_type=str, start_to_close_timeout=timedelta(seconds=120),
            retry_policy=CLAIM_RETRY, summary=f"default branch of {params.remote}")
    except ActivityError as err:
        raise ApplicationError(f"board refused: {root_cause_message(err)}", type="BoardError",
                               non_retryable=True) from None


async def check_task_env(params: OrchestratorInput) -> None:
    """A board may only ask for worker variables the worker's operator lets tasks see: the
    worker knows its allow-list (the CLI does not), so it is asked before anything starts."""
    names = {n for t in params.board.tasks if not t.done for n in t.env}
    if params.board_ref is not None:
        names.update(params.board_ref.env)
    if params.first_page is not None:
        names.update(n for t in params.first_page.tasks for n in t.env)
    if not names or not compat.task_env_checked():
        return
    try:
        await workflow.execute_activity(
            ACTIVITY_CHECK_TASK_ENV, TaskEnvCheck(names=sorted(names)),
            start_to_close_timeout=timedelta(seconds=30), retry_policy=ENV_CHECK_RETRY,
            summary=f"check env {', '.join(sorted(names))}"[:200],
        )
    except ActivityError as err:
        raise ApplicationError(f"board refused: {cause_message(err)}", type="EnvNotAllowed",
                               non_retryable=True) from None


async def claim(params: OrchestratorInput, branches: list[str]) -> None:
    """The claim activity for these branches (ActivityError when another running run holds some)."""
    info = workflow.info()
    await workflow.execute_activity(
        ACTIVITY_CLAIM_BRANCHES,
        BranchClaim(params.repo, branches, info.workflow_id, info.first_execution_run_id),
        start_to_close_timeout=timedelta(seconds=120),
        heartbeat_timeout=timedelta(seconds=params.heartbeat_timeout_seconds),
        retry_policy=CLAIM_RETRY,
        summary=f"claim {len(branches)} task branch(es)",
    )


async def claim_branches(params: OrchestratorInput, branches: list[str]) -> None:
    """Refuse to start when another running run holds some of this board's branches."""
    if not branches:
        return
    try:
        await claim(params, branches)
    except ActivityError as err:
        raise ApplicationError(
            f"board refused: {root_cause_message(err)}", type="BranchesHeld", non_retryable=True
        ) from None


async def claim_page(params: OrchestratorInput, tasks: list[TaskSpec],
                     first: bool) -> dict[str, str]:
    """Claim a page's task branches (see `claim_branches`); the branches another run holds,
    with the reason. On the first page that refuses the board, as an inline board is refused."""
    if not tasks:
        return {}
    branches = [t.branch for t in tasks]
    try:
        await claim(params, branches)
    except ActivityError as err:
        reason = root_cause_message(err)
        if first:
            raise ApplicationError(f"board refused: {reason}", type="BranchesHeld",
                                   non_retryable=True) from None
        return {branch: reason[:REASON_MAX_CHARS] for branch in branches}
    return {}


async def store_inline_board(params: OrchestratorInput) -> BoardReference:
    """A board started with its tasks inline (by hand, or an older client) is stored in the clone
    once, so that continue-as-new never carries them; its reference from then on."""
    size = len(json.dumps(asdict(params.board)))
    if size > INLINE_BOARD_MAX_BYTES:
        raise ApplicationError(
            f"board refused: an inline board may be at most {INLINE_BOARD_MAX_BYTES // 1024} KB of "
            f"JSON, this one is {size // 1024} KB; store it in the clone and start with its "
            "reference (`taskfleet run` does; taskfleet.clients.board_store.store_board)",
            type="BoardError", non_retryable=True)
    try:
        return await workflow.execute_activity(
            ACTIVITY_STORE_BOARD, StoreBoardInput(repo=params.repo, board=params.board),
            result_type=BoardReference, start_to_close_timeout=timedelta(seconds=120),
            retry_policy=STORE_RETRY, summary=f"store board {params.board.name} in the clone",
        )
    except ActivityError as err:
        raise ApplicationError(f"board refused: {root_cause_message(err)}", type="BoardError",
                               non_retryable=True) from None
