"""Client side of the orchestrator: start a board, watch it, cancel it."""

from __future__ import annotations

import os
import uuid
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from taskfleet.models import (
    DEFAULT_TASK_QUEUE,
    ORCHESTRATOR_WORKFLOW,
    Board,
    OrchestratorInput,
    OrchestratorProgress,
    OrchestratorResult,
)
from taskfleet.naming import orchestrator_workflow_id
from taskfleet.search_attributes import TASKFLEET_KIND, TASKFLEET_REPO


async def start_board(
    client: Client,
    board: Board,
    repo: str,
    task_queue: str = DEFAULT_TASK_QUEUE,
    workflow_id: str | None = None,
    **options: Any,
) -> WorkflowHandle[Any, OrchestratorResult]:
    repo = os.path.abspath(repo)
    workflow_id = workflow_id or orchestrator_workflow_id(board.name, uuid.uuid4().hex[:8])
    open_tasks = sum(1 for t in board.tasks if not t.done)
    return await client.start_workflow(
        ORCHESTRATOR_WORKFLOW,
        OrchestratorInput(board=board, repo=repo, **options),
        id=workflow_id,
        task_queue=task_queue,
        result_type=OrchestratorResult,
        static_summary=f"board {board.name}: {open_tasks} tasks on {repo}",
        search_attributes=TypedSearchAttributes(
            [SearchAttributePair(TASKFLEET_KIND, "board"), SearchAttributePair(TASKFLEET_REPO, repo)]
        ),
    )


async def progress(handle: WorkflowHandle) -> OrchestratorProgress:
    return await handle.query("progress", result_type=OrchestratorProgress)
