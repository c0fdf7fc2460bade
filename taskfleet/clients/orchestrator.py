"""Client side of the orchestrator: start a board, watch it, cancel it."""

from __future__ import annotations

import asyncio
import os
import uuid
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import TypedSearchAttributes

from taskfleet.clients.board_store import StoredBoard, store_board
from taskfleet.core.git_objects import is_repository
from taskfleet.core.ids import orchestrator_workflow_id
from taskfleet.core.models.orchestrator import (
    Board,
    OrchestratorInput,
    OrchestratorProgress,
    OrchestratorResult,
)
from taskfleet.core.names import DEFAULT_TASK_QUEUE, ORCHESTRATOR_WORKFLOW, QUERY_PROGRESS
from taskfleet.core.search_attributes import is_unknown_search_attribute, tagged


async def start_board(
    client: Client,
    board: Board | StoredBoard,
    repo: str,
    task_queue: str = DEFAULT_TASK_QUEUE,
    workflow_id: str | None = None,
    **options_for_input: Any,
) -> WorkflowHandle[Any, OrchestratorResult]:
    """Start a board: by reference (stored in the clone first) when the clone is reachable from
    here, else inline (up to 256 KB of JSON)."""
    repo = os.path.abspath(repo)
    if isinstance(board, Board) and is_repository(repo):
        board = await asyncio.to_thread(store_board, board, repo)
    if isinstance(board, StoredBoard):
        name, open_tasks = board.settings.name, board.reference.open_tasks
        params = OrchestratorInput(board=board.settings, board_ref=board.reference, repo=repo,
                                   first_page=board.first_page, **options_for_input)
    else:
        name, open_tasks = board.name, sum(1 for t in board.tasks if not t.done)
        params = OrchestratorInput(board=board, repo=repo, **options_for_input)
    workflow_id = workflow_id or orchestrator_workflow_id(name, uuid.uuid4().hex[:8])
    options: dict[str, Any] = dict(
        id=workflow_id,
        task_queue=task_queue,
        result_type=OrchestratorResult,
        static_summary=f"board {name}: {open_tasks} tasks on {repo}",
    )
    try:
        return await client.start_workflow(ORCHESTRATOR_WORKFLOW, params,
                                           search_attributes=tagged("board", repo), **options)
    except Exception as err:
        if not is_unknown_search_attribute(err):
            raise
        return await client.start_workflow(ORCHESTRATOR_WORKFLOW, params,
                                           search_attributes=TypedSearchAttributes([]), **options)


async def progress(handle: WorkflowHandle,
                   rpc_timeout: timedelta | None = None) -> OrchestratorProgress:
    """The running workflow's `progress` query (a worker answers; `rpc_timeout` bounds the wait)."""
    return await handle.query(QUERY_PROGRESS, result_type=OrchestratorProgress,
                              rpc_timeout=rpc_timeout)
