"""Names of the refs taskfleet keeps in a clone (stored boards, run stores, merge-queue targets):
pure, so the workflow, activities and the CLI compute the same ones."""

from __future__ import annotations

import hashlib
import re

BOARDS_REF_PREFIX = "refs/taskfleet/boards/"
RUNS_REF_PREFIX = "refs/taskfleet/runs/"
QUEUE_REF_PREFIX = "refs/taskfleet/queue/"


def board_ref(board_id: str) -> str:
    return f"{BOARDS_REF_PREFIX}{board_id}"


def _component(text: str, limit: int = 80) -> str:
    """A ref path component from any text: safe characters, no `..`, no leading dot, no `.lock`."""
    text = re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-")[:limit]
    return text or "x"


def run_ref(workflow_id: str, first_run_id: str) -> str:
    """The ref of one run's outcomes: readable, and unique even for ids that read the same."""
    digest = hashlib.sha256(workflow_id.encode()).hexdigest()[:8]
    return f"{RUNS_REF_PREFIX}{_component(workflow_id)}-{digest}/{_component(first_run_id)}"


def queue_ref(queue_id: str) -> str:
    """Where a merge queue fetches its target (`.../target`, its merged chain as `.../candidate`):
    one folder per queue, so two queues never share a ref."""
    return (f"{QUEUE_REF_PREFIX}{_component(queue_id, 60)}-"
            f"{hashlib.sha256(queue_id.encode()).hexdigest()[:8]}/target")
