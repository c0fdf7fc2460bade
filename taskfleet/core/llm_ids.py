"""Ids of the Claude implementer: its batcher's workflow id, per-task child ids, custom ids."""

from __future__ import annotations

import hashlib
import re

from taskfleet.core.ids import slug
from taskfleet.core.names import DEFAULT_TASK_QUEUE

LLM_BATCH_WORKFLOW_ID = "taskfleet-llm-batch"
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def llm_batch_workflow_id(task_queue: str = DEFAULT_TASK_QUEUE) -> str:
    """`taskfleet-llm-batch` for the default queue; other queues get their own batcher, whose id
    names the queue (readable slug + 8 hex of the exact name, so two queues never share one)."""
    if task_queue == DEFAULT_TASK_QUEUE:
        return LLM_BATCH_WORKFLOW_ID
    digest = hashlib.sha256(task_queue.encode()).hexdigest()[:8]
    return f"{LLM_BATCH_WORKFLOW_ID}-{slug(task_queue, 40)}-{digest}"


def llm_task_workflow_id(run_key: str, task_id: str) -> str:
    """The child workflow that runs one LLM task of one orchestrator run."""
    return f"{run_key}/llm/{task_id}"


def llm_custom_id(first_run_id: str, task_id: str, attempt: int, resubmit: int = 0) -> str:
    """Deterministic from the task workflow's first run id (not its id: replays agree, and a re-run
    never repeats ids the batcher would drop), task and attempt; fits `^[a-zA-Z0-9_-]{1,64}$`."""
    digest = hashlib.sha256(f"{first_run_id}\0{task_id}".encode()).hexdigest()[:16]
    head = re.sub(r"[^a-zA-Z0-9_-]", "_", task_id)[:32]
    tail = f"-a{attempt}" + (f"r{resubmit}" if resubmit else "")
    return f"{head}-{digest}{tail}"


def judge_workflow_id(run_id: str, task_id: str, round_: int) -> str:
    """The child workflow that asks a Claude judge about a task's commit (one per judging round)."""
    return f"{run_id}/judge/{task_id}/{round_}"
