"""Client side of boards by reference: store a board in the clone, get what a run starts with.

`taskfleet run` stores the board file a page at a time (the CLI never parses it whole), then starts
the orchestrator with the reference and the board-wide settings, so the workflow's input is the
same few hundred bytes for 10 tasks or 100,000.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskfleet.core.board_rows import BoardHead, RawTask, scan_board, scan_specs, unique_ids
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


def _settings(head: BoardHead, path: str) -> Board:
    return Board(tasks=[], name=head.name, path=path, format=head.format, **board_wide(head.settings))


def _check_clone(repo: str) -> None:
    if not is_repository(repo):
        raise CloneUnreachable(f"{repo} is not a git repository from here; boards are stored in the clone")


def _head_of(items: Iterator[BoardHead | RawTask]) -> tuple[BoardHead, Iterator[BoardHead | RawTask]]:
    """The scan's BoardHead (it comes first), and the scan itself, replayed from its start."""
    head = next(items)
    assert isinstance(head, BoardHead)

    def replay() -> Iterator[BoardHead | RawTask]:
        yield head
        yield from items

    return head, replay()


def store_board_file(path: str | Path, repo: str, **overrides: Any) -> StoredBoard:
    """Store a `.toml` or markdown board file in `repo` (read a line at a time); BoardError when the
    board-wide part is wrong or the file cannot be read. Bad tasks are stored as such: each fails alone."""
    path = Path(path)
    repo = os.path.abspath(repo)
    _check_clone(repo)
    fmt = "toml" if path.suffix == ".toml" else "markdown"
    try:
        with open(path, encoding="utf-8") as lines:
            head, items = _head_of(unique_ids(scan_board(lines, str(path), fmt, **overrides), str(path)))
            reference, first = write_board_with_first_page(repo, items, str(path), FIRST_PAGE_MAX_ROWS,
                                                           FIRST_PAGE_MAX_BYTES)
    except OSError as err:
        raise BoardError(f"cannot read board {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise BoardError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except GitStoreError as err:
        raise BoardError(f"cannot store board {path} in {repo}: {err}") from None
    return StoredBoard(reference=reference, settings=_settings(head, str(path)), first_page=first)


def store_board(board: Board, repo: str) -> StoredBoard:
    """Store a board built in code (or parsed already): every task field is kept as it is."""
    repo = os.path.abspath(repo)
    _check_clone(repo)
    source = board.path or board.name
    head, items = _head_of(unique_ids(scan_specs(board), source))
    try:
        reference, first = write_board_with_first_page(repo, items, source, FIRST_PAGE_MAX_ROWS, FIRST_PAGE_MAX_BYTES)
    except GitStoreError as err:
        raise BoardError(f"cannot store board {board.name} in {repo}: {err}") from None
    return StoredBoard(reference=reference, settings=_settings(head, board.path), first_page=first)


def read_board_head(path: str | Path, **overrides: Any) -> BoardHead:
    """Only the board-wide part of a board file (read up to its first task): refused early, cheaply."""
    path = Path(path)
    fmt = "toml" if path.suffix == ".toml" else "markdown"
    try:
        with open(path, encoding="utf-8") as lines:
            head = next(scan_board(lines, str(path), fmt, **overrides))
    except OSError as err:
        raise BoardError(f"cannot read board {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise BoardError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    assert isinstance(head, BoardHead)
    return head


def board_settings(head: BoardHead, path: str = "") -> Board:
    """A board's settings as the `Board` (without tasks) a run starts with."""
    return _settings(head, path)
