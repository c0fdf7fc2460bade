"""How a long-lived workflow (a clone's git batcher, a target's merge queue) is started: by whoever
sends it the first message, a client or the landing activity, with our search attributes, or
without them on a namespace that lacks them."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from temporalio.common import WorkflowIDConflictPolicy

from taskfleet.core.ids import git_batch_workflow_id, merge_queue_workflow_id
from taskfleet.core.models.git_batch import GitBatchConfig, GitOp
from taskfleet.core.models.merge_queue import MergeQueueConfig, QueueEntry
from taskfleet.core.names import GIT_BATCH_WORKFLOW, MERGE_QUEUE_WORKFLOW
from taskfleet.core.search_attributes import is_unknown_search_attribute, tagged

T = TypeVar("T")


@dataclass(frozen=True)
class LongLived:
    """One long-lived workflow: its type, id, task queue, and what the UI and searches show."""

    workflow_type: str
    workflow_id: str
    task_queue: str
    kind: str  # TaskfleetKind
    repo: str
    summary: str

    def options(self, search_attributes: bool = True) -> dict[str, Any]:
        options: dict[str, Any] = dict(id=self.workflow_id, task_queue=self.task_queue,
                                       static_summary=self.summary,
                                       id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        if search_attributes:
            options["search_attributes"] = tagged(self.kind, self.repo)
        return options

    async def start(self, start: Callable[[dict[str, Any]], Awaitable[T]]) -> T:
        """`start(options)`, again without our search attributes when the namespace lacks them."""
        try:
            return await start(self.options())
        except Exception as err:
            if not is_unknown_search_attribute(err):
                raise
            return await start(self.options(search_attributes=False))


def git_batcher(config: GitBatchConfig, task_queue: str) -> LongLived:
    repo = os.path.abspath(config.repo)
    return LongLived(GIT_BATCH_WORKFLOW, git_batch_workflow_id(repo, config.remote, task_queue),
                     task_queue, "git-batch", repo, f"git batcher: {repo} -> {config.remote}")


def merge_queue(config: MergeQueueConfig, task_queue: str) -> LongLived:
    repo = os.path.abspath(config.repo)
    return LongLived(MERGE_QUEUE_WORKFLOW, merge_queue_workflow_id(
        repo, config.remote, config.target, task_queue), task_queue, "merge-queue", repo,
                     f"merge queue: {repo} -> {config.remote}/{config.target}")


# an entry's fields the queue fills in
_QUEUE_SETS = {"enqueued_at", "verified_in", "split_in", "seq", "passed_alone"}


def op_payload(op: GitOp | dict[str, Any]) -> dict[str, Any]:
    """An op as the JSON object sent on the wire: empty fields and `enqueued_at` left out."""
    if isinstance(op, GitOp):
        return {k: v for k, v in vars(op).items() if k != "enqueued_at" and v not in ("", [], None)}
    return op


def entry_payload(entry: QueueEntry | dict[str, Any]) -> dict[str, Any]:
    """An entry as the JSON object sent on the wire: empty fields and the queue's own left out."""
    if isinstance(entry, QueueEntry):
        sent = {f.name for f in fields(QueueEntry)} - _QUEUE_SETS
        return {k: v for k, v in vars(entry).items() if k in sent and v not in ("", None, 0, [])}
    return entry
