"""Client side of boards by reference: store a board in the clone a page at a time as it is read, so
the orchestrator's input is the same few hundred bytes for 10 tasks or 100,000."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from taskfleet.clients.preflight import check_clone
from taskfleet.core.board_store import write_board
from taskfleet.core.boards import (
    BoardError,
    CheckedBoard,
    check_board,
    parse_board_file,
    scan_specs,
)
from taskfleet.core.git_objects import GitStoreError, is_repository
from taskfleet.core.models.board_store import BoardPage, BoardReference
from taskfleet.core.models.orchestrator import Board


@dataclass
class StoredBoard:
    """A stored board's reference, and its board-wide settings as a `Board` without tasks."""

    reference: BoardReference
    settings: Board
    # The first rows, in the run's input so a small board starts without a page-load round trip
    # (None: the run loads every page).
    first_page: BoardPage | None = None


# The first page travels in the run's input only up to this size (the input stays small).
FIRST_PAGE_MAX_ROWS = 200
FIRST_PAGE_MAX_BYTES = 64 * 1024


class CloneUnreachable(BoardError):
    """The clone is not a git repository from here: the board cannot be stored by reference."""


def store_checked_board(checked: CheckedBoard, repo: str,
                        remote: str | None = None) -> StoredBoard | Board:
    """Stage 3 of reading a board: rows written to `repo` a page at a time; the reference and first
    page. With `remote` the clone is checked first; a board checked whole goes inline."""
    if checked.board is not None:
        return checked.board
    settings = checked.settings
    if remote is None:
        repo = os.path.abspath(repo)
        if not is_repository(repo):
            raise CloneUnreachable(f"{repo} is not a git repository from here; boards are stored "
                                   "in the clone")
    else:
        target = settings.queue_target if settings.land == "queue" else None
        repo, base = check_clone(repo, settings.base, remote, target)
        # The base every row is checked against, and the run's.
        checked.head.settings["base"] = base
        settings = replace(settings, base=base)
    try:
        reference, first = write_board(repo, checked.head, checked.rows, checked.source,
                                       (FIRST_PAGE_MAX_ROWS, FIRST_PAGE_MAX_BYTES))
    except GitStoreError as err:
        raise BoardError(f"cannot store board {checked.source} in {repo}: {err}") from None
    return StoredBoard(reference=reference, settings=settings, first_page=first)


def store_board_file(path: str | Path, repo: str, **overrides: Any) -> StoredBoard:
    """Store a `.toml` or markdown board file in `repo` with the CLI's `overrides`: parse, check and
    store without the clone's own checks."""
    return _stored(check_board(parse_board_file(path), **overrides), repo)


def store_board(board: Board, repo: str) -> StoredBoard:
    """Store a board built in code (or already parsed): task fields kept as they are; board-wide
    settings, ids and branches checked as a file's are."""
    return _stored(check_board(scan_specs(board)), repo)


def _stored(checked: CheckedBoard, repo: str) -> StoredBoard:
    stored = store_checked_board(checked, repo)
    assert isinstance(stored, StoredBoard)
    return stored
