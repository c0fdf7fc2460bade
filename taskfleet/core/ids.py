"""Workflow ids that mean something, computed the same way by clients, activities and workflows."""

from __future__ import annotations

import hashlib
import posixpath
import re

from taskfleet.core.names import DEFAULT_TASK_QUEUE

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(text: str, limit: int = 40) -> str:
    return _UNSAFE.sub("-", text).strip("-")[:limit] or "x"


def git_batch_workflow_id(repo: str, remote: str = "origin",
                          task_queue: str = DEFAULT_TASK_QUEUE) -> str:
    """`taskfleet-git-<clone name>-<remote>-<8 hex>`: one batcher per (clone, remote, task queue),
    run where its callers' workers poll. `repo` must be absolute (callers resolve it)."""
    path = posixpath.normpath(repo)
    key = (f"{path}\0{remote}" if task_queue == DEFAULT_TASK_QUEUE
           else f"{path}\0{remote}\0{task_queue}")
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"taskfleet-git-{slug(posixpath.basename(path) or 'repo')}-{remote}-{digest}"


def merge_queue_workflow_id(
    repo: str, remote: str, target: str, task_queue: str = DEFAULT_TASK_QUEUE
) -> str:
    """`taskfleet-queue-<clone name>-<remote>-<target>-<8 hex>`: one merge queue per (clone, remote,
    target, task queue). `repo` must be absolute."""
    path = posixpath.normpath(repo)
    key = f"{path}\0{remote}\0{target}" + ("" if task_queue == DEFAULT_TASK_QUEUE
                                           else f"\0{task_queue}")
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return (f"taskfleet-queue-{slug(posixpath.basename(path) or 'repo')}-{remote}-"
            f"{slug(target, 40)}-{digest}")


def queue_run_key(run_key: str, attempt: int) -> str:
    """The run key of a task's re-run after the merge queue sent it back (`attempt` >= 1): its own
    commit trailer, log folder and entry id, so it never takes the first attempt's for its own."""
    return f"{run_key}#queue-{attempt}" if attempt else run_key


def orchestrator_workflow_id(board_name: str, unique: str) -> str:
    return f"taskfleet-run-{slug(board_name)}-{unique}"


def landing_op_id(run_key: str, task_id: str) -> str:
    """One op id per (orchestrator run, task): a retried task never lands twice."""
    return f"{run_key}/{task_id}"


def task_of_landing_op(run_key: str, op_id: str) -> str | None:
    """The task a landing op id of this run names (the inverse of `landing_op_id`)."""
    prefix = f"{run_key}/"
    return op_id[len(prefix) :] if op_id.startswith(prefix) else None


def plan_workflow_id(goal: str, unique: str) -> str:
    """`taskfleet-plan-<head of the goal>-<unique>`: which plan it is, readable in the Web UI."""
    head = " ".join(goal.split()[:6]).lower()
    return f"taskfleet-plan-{slug(head, 30)}-{unique}"
