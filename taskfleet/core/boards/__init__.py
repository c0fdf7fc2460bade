"""Boards: the markdown table of `tasks/board-*.md` files, or TOML for richer ones. `read.py`
streams a file into its board-wide part and rows, `check.py` applies overrides and checks rows as
they pass, `rules.py` turns a row into a `TaskSpec`, `keys.py` registers every key; `load_board`
collects all."""

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
