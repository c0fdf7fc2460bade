"""A board file read once, along one path, into a started run: parse -> check -> store -> start.

Each stage is a function of its own module, called once, in order, and hands the next a dataclass:

    parse   taskfleet.core.boards.parse_board_file         -> ParsedBoard   the board-wide part; rows as a stream
    check   taskfleet.core.boards.check_board              -> CheckedBoard  the CLI's overrides; the board's rules
    store   taskfleet.clients.board_store.store_checked_board -> StoredBoard  the clone checked; rows stored a page at a time
    start   taskfleet.clients.orchestrator.start_board     -> WorkflowHandle  the orchestrator, with the reference

A problem with the board as a whole is a BoardError before anything starts; a problem in one row is
stored with the row and fails that task alone, naming its line. With `check_clone=False` (the clone
is on the worker's machine only) the board is checked whole instead and goes inline.
"""

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
    """What `taskfleet run` asks for: a board file, the clone, the server, and the CLI's board-wide settings."""

    path: str
    repo: str
    remote: str = "origin"
    # --run, --verify, --base, --land, --max-parallel, ...: applied over the file's keys at the check stage.
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
    """Parse, check, store and start `run.path`; `say` gets each notice for a person as it comes.

    BoardError: the board is refused and nothing started; StartupError: the clone or the server;
    WorkflowAlreadyStartedError: `run.workflow_id` is still running."""
    parsed = parse_board_file(run.path, whole=not run.check_clone)
    checked = check_board(parsed, **run.overrides)
    # Stored in the clone a line at a time: the CLI never holds the board, the workflow starts with
    # its reference and loads it a page at a time.
    board = store_checked_board(checked, run.repo, run.remote if run.check_clone else None)
    if checked.own_verification:
        # The cell is the more specific setting, so it wins; say so rather than ignore --verify silently.
        say(f"--verify applies to the other tasks; {', '.join(checked.own_verification)} keep the command in their "
            "Verification cell")
    client = await connect(load_connect_config(run.address, run.namespace))
    notice = await ensure_search_attributes(client)
    if notice:
        say(notice)
    handle = await start_board(client, board, run.repo, task_queue=run.task_queue, remote=run.remote,
                               max_parallel=run.max_parallel, workflow_id=run.workflow_id)
    open_tasks = (board.reference.open_tasks if isinstance(board, StoredBoard)
                  else sum(1 for t in board.tasks if not t.done))
    return StartedBoard(client=client, handle=handle, open_tasks=open_tasks)
