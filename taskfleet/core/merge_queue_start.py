"""How a `MergeQueueWorkflow` is started on first use, shared by clients and the landing activity."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import fields
from typing import Any, TypeVar

from temporalio.common import WorkflowIDConflictPolicy

from taskfleet.core.ids import merge_queue_workflow_id
from taskfleet.core.models.merge_queue import MergeQueueConfig, QueueEntry
from taskfleet.core.search_attributes import is_unknown_search_attribute, tagged

T = TypeVar("T")
_SET_BY_QUEUE = {"enqueued_at", "verified_in", "split_in", "seq", "passed_alone"}
_SENT = {f.name for f in fields(QueueEntry)} - _SET_BY_QUEUE


def queue_start_options(config: MergeQueueConfig, task_queue: str, search_attributes: bool = True) -> dict[str, Any]:
    repo = os.path.abspath(config.repo)
    options: dict[str, Any] = dict(
        id=merge_queue_workflow_id(repo, config.remote, config.target, task_queue),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=f"merge queue: {repo} -> {config.remote}/{config.target}",
    )
    if search_attributes:
        options["search_attributes"] = tagged("merge-queue", repo)
    return options


async def with_queue_start_options(
    start: Callable[[dict[str, Any]], Awaitable[T]], config: MergeQueueConfig, task_queue: str
) -> T:
    """Start with our search attributes, or without them on a namespace that lacks them."""
    try:
        return await start(queue_start_options(config, task_queue))
    except Exception as err:
        if not is_unknown_search_attribute(err):
            raise
        return await start(queue_start_options(config, task_queue, search_attributes=False))


def entry_payload(entry: QueueEntry | dict[str, Any]) -> dict[str, Any]:
    """An entry as the JSON object sent on the wire: empty fields and the queue's own fields left out."""
    if isinstance(entry, QueueEntry):
        return {k: v for k, v in vars(entry).items() if k in _SENT and v not in ("", None, 0, [])}
    return entry
