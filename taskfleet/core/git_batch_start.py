"""How a `GitBatchWorkflow` is started on first use, shared by clients and the landing activity."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio.common import WorkflowIDConflictPolicy

from taskfleet.core.ids import git_batch_workflow_id
from taskfleet.core.models.git_batch import GitBatchConfig, GitOp
from taskfleet.core.search_attributes import is_unknown_search_attribute, tagged

T = TypeVar("T")


def start_options(config: GitBatchConfig, task_queue: str,
                  search_attributes: bool = True) -> dict[str, Any]:
    repo = os.path.abspath(config.repo)
    options: dict[str, Any] = dict(
        id=git_batch_workflow_id(repo, config.remote, task_queue),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=f"git batcher: {repo} -> {config.remote}",
    )
    if search_attributes:
        options["search_attributes"] = tagged("git-batch", repo)
    return options


async def with_start_options(
    start: Callable[[dict[str, Any]], Awaitable[T]], config: GitBatchConfig, task_queue: str
) -> T:
    """Start with our search attributes, or without them on a namespace that lacks them."""
    try:
        return await start(start_options(config, task_queue))
    except Exception as err:
        if not is_unknown_search_attribute(err):
            raise
        return await start(start_options(config, task_queue, search_attributes=False))


def op_payload(op: GitOp | dict[str, Any]) -> dict[str, Any]:
    """An op as the JSON object sent: empty fields left out, `enqueued_at` never sent."""
    if isinstance(op, GitOp):
        data = {k: v for k, v in vars(op).items() if k != "enqueued_at"}
        return {k: v for k, v in data.items() if v not in ("", [], None)}
    return op
