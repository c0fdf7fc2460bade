"""Client side of boards by reference: store a board in the clone, get what a run starts with.

`taskfleet run` stores the board file a page at a time as its rows are read (the CLI never holds it
whole), then starts the orchestrator with the reference and the board-wide settings, so the
workflow's input is the same few hundred bytes for 10 tasks or 100,000.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from itertools import chain
from pathlib import Path
from typing import Any

from taskfleet.clients.preflight import check_clone
from taskfleet.core.board_check import CheckedBoard, check_board, unique_ids
from taskfleet.core.board_parse import parse_board_file
from taskfleet.core.board_rows import scan_specs
from taskfleet.core.board_store import write_board_with_first_page
from taskfleet.core.boards import BoardError, board_wide
from taskfleet.core.git_objects import GitStoreError, is_repository
from taskfleet.core.models.board_store import BoardPage, BoardReference
from taskfleet.core.models.orchestrator import Board


@dataclass
class StoredBoard:
    """A stored board's reference, and its board-wide settings as a `Board` without tasks."""

    reference: BoardReference
    settings: Board
    # The board's first rows as a worker would load them, handed to the run in its input so that
    # a small board starts without a page-load round trip (None: the run loads every page).
    first_page: BoardPage | None = None


# The first page travels in the run's input only up to this size (the input stays small).
FIRST_PAGE_MAX_ROWS = 200
FIRST_PAGE_MAX_BYTES = 64 * 1024


class CloneUnreachable(BoardError):
    """The clone is not a git repository from here: the board cannot be stored by reference."""


def _check_clone(repo: str) -> None:
    if not is_repository(repo):
        raise CloneUnreachable(f"{repo} is not a git repository from here; boards are stored in the clone")


def store_checked_board(checked: CheckedBoard, repo: str, remote: str | None = None) -> StoredBoard | Board:
    """Stage 3 of reading a board (parse -> check -> store -> start): the checked board stored in
    the clone `repo` a page at a time, as its rows are read; its reference and first page.

    With `remote`, the clone is checked first (`taskfleet run`: a folder, a git repository with
    that remote and the base branch; a board that names no base gets the remote's default branch,
    asked here). A board checked whole is not stored here: it goes inline, and the start stores it
    where the clone is reachable. BoardError when the board-wide part is wrong or the file cannot
    be read; bad tasks are stored as such: each fails alone."""
    if checked.board is not None:
        return checked.board
    assert checked.head is not None
    settings = checked.settings
    if remote is None:
        repo = os.path.abspath(repo)
        _check_clone(repo)
    else:
        repo, base = check_clone(repo, settings.base, remote, settings.queue_target if settings.land == "queue" else None)
        # The base every row is checked against, and the run's.
        checked.head.settings["base"] = base
        settings = replace(settings, base=base)
    try:
        reference, first = write_board_with_first_page(repo, chain([checked.head], checked.rows), checked.source,
                                                       FIRST_PAGE_MAX_ROWS, FIRST_PAGE_MAX_BYTES)
    except GitStoreError as err:
        raise BoardError(f"cannot store board {checked.source} in {repo}: {err}") from None
    return StoredBoard(reference=reference, settings=settings, first_page=first)


def store_board_file(path: str | Path, repo: str, **overrides: Any) -> StoredBoard:
    """Store a `.toml` or markdown board file in `repo` (read a line at a time), with the CLI's
    board-wide `overrides`: the parse, check and store stages without the clone's own checks."""
    stored = store_checked_board(check_board(parse_board_file(path), **overrides), repo)
    assert isinstance(stored, StoredBoard)
    return stored


def store_board(board: Board, repo: str) -> StoredBoard:
    """Store a board built in code (or parsed already): every task field is kept as it is."""
    repo = os.path.abspath(repo)
    _check_clone(repo)
    source = board.path or board.name
    items = scan_specs(board)
    head = next(items)
    try:
        reference, first = write_board_with_first_page(repo, chain([head], unique_ids(items, source)), source,
                                                       FIRST_PAGE_MAX_ROWS, FIRST_PAGE_MAX_BYTES)
    except GitStoreError as err:
        raise BoardError(f"cannot store board {board.name} in {repo}: {err}") from None
    settings = Board(tasks=[], name=head.name, path=board.path, format=head.format, **board_wide(head.settings))
    return StoredBoard(reference=reference, settings=settings, first_page=first)
