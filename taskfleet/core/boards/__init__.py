"""Boards: the markdown table of `tasks/board-*.md` files, or TOML for richer ones.

One way to read a board: `read.py` scans a file into its board-wide part and a stream of rows,
`check.py` puts the CLI's overrides on top and checks the rows as they pass, `rules.py` turns a
row into a `TaskSpec`; a whole board (`load_board`) is that stream collected. `keys.py` is the
registry of every key a board may set.
"""

from taskfleet.core.boards.check import (
    CheckedBoard,
    check_board,
    load_board,
    parse_markdown_board,
    parse_toml_board,
    unique_ids,
)
from taskfleet.core.boards.keys import BOARD_KEYS, KEYS, QUEUE_KEYS, TASK_KEYS, keys_table
from taskfleet.core.boards.read import (
    BoardError,
    BoardHead,
    ParsedBoard,
    RawTask,
    parse_board_file,
    parse_board_text,
    render_markdown_status,
    scan_specs,
)
from taskfleet.core.boards.rules import (
    ANTHROPIC,
    board_wide,
    check_board_settings,
    has_judge,
    task_from_row,
    validate_board,
)

__all__ = [
    "ANTHROPIC", "BOARD_KEYS", "KEYS", "QUEUE_KEYS", "TASK_KEYS", "BoardError", "BoardHead",
    "CheckedBoard", "ParsedBoard", "RawTask", "board_wide", "check_board", "check_board_settings",
    "has_judge", "keys_table", "load_board", "parse_board_file", "parse_board_text",
    "parse_markdown_board", "parse_toml_board", "render_markdown_status", "scan_specs",
    "task_from_row", "unique_ids", "validate_board",
]
