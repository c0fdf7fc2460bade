"""A board file read once, along one path, into a started run: parse (`boards.parse_board_file`) ->
check (`boards.check_board`) -> store (`board_store.store_checked_board`) -> start
(`orchestrator.start_board`), each handing the next a dataclass. A board-wide problem is a
BoardError before anything starts; a bad row fails that task alone, naming its line."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client, WorkflowHandle

from taskfleet.clients.board_store import StoredBoard, store_checked_board
from taskfleet.clients.connection import connect, load_connect_config
from taskfleet.clients.orchestrator import start_board
from taskfleet.clients.search_attributes import ensure_search_attributes
from taskfleet.core.boards import check_board, parse_board_file
from taskfleet.core.models.orchestrator import OrchestratorResult
from taskfleet.core.names import DEFAULT_TASK_QUEUE


@dataclass
class BoardRun:
    """What `taskfleet run` asks for: board file, clone, server, the CLI's board-wide settings."""

    path: str
    repo: str
    remote: str = "origin"
    # --run, --verify, --base, --land, --max-parallel, ...: applied over the file's keys when
    # checked.
    overrides: dict[str, Any] = field(default_factory=dict)
    check_clone: bool = True  # False: the clone is on the worker's machine only (--no-check)
    address: str | None = None
    namespace: str | None = None
    task_queue: str = DEFAULT_TASK_QUEUE
    max_parallel: int = 0
    workflow_id: str | None = None


@dataclass
class StartedBoard:
    """A started run: its client and handle, and how many tasks it has to do."""

    client: Client
    handle: WorkflowHandle[Any, OrchestratorResult]
    open_tasks: int


async def start_board_file(run: BoardRun, say: Callable[[str], None]) -> StartedBoard:
    """Parse, check, store and start `run.path`; `say` gets each notice for a person. Raises
    BoardError (nothing started), StartupError, or WorkflowAlreadyStartedError."""
    parsed = parse_board_file(run.path, whole=not run.check_clone)
    checked = check_board(parsed, **run.overrides)
    # Stored a line at a time: the CLI never holds the board; the workflow starts with its
    # reference.
    board = store_checked_board(checked, run.repo, run.remote if run.check_clone else None)
    if checked.own_verification:
        # The cell is more specific, so it wins; say so rather than ignore --verify silently.
        own = checked.own_verification
        whose = "keeps the command in its" if len(own) == 1 else "keep the command in their"
        say(f"--verify applies to the other tasks; {', '.join(own)} {whose} Verification cell")
    client = await connect(load_connect_config(run.address, run.namespace))
    notice = await ensure_search_attributes(client)
    if notice:
        say(notice)
    handle = await start_board(client, board, run.repo, task_queue=run.task_queue,
                               remote=run.remote, max_parallel=run.max_parallel,
                               workflow_id=run.workflow_id)
    open_tasks = (board.reference.open_tasks if isinstance(board, StoredBoard)
                  else sum(1 for t in board.tasks if not t.done))
    return StartedBoard(client=client, handle=handle, open_tasks=open_tasks)
