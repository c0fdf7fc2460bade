"""Writing a TOML board: strings escaped as TOML requires, keys in a fixed order, so a board a
program writes (the planner's) is read back by `taskfleet run` exactly as written."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n",
            "\f": "\\f", "\r": "\\r"}


def toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped (DEL included)."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"a {type(value).__name__} has no place on a board")


def comment(lines: Iterable[str]) -> str:
    """`# ` lines; characters TOML refuses in a comment (controls but tab) become spaces."""
    clean = ("".join(" " if (ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F else c for c in line)
             for line in lines)
    return "".join(f"# {line}".rstrip() + "\n" for line in clean)


def board_toml(settings: dict[str, Any], tasks: list[dict[str, Any]],
               header: Iterable[str] = ()) -> str:
    """Board-wide keys first, then one `[[tasks]]` table per task, keys in the order given."""
    text = comment(header)
    text += "".join(f"{key} = {toml_value(value)}\n" for key, value in settings.items())
    for task in tasks:
        text += "\n[[tasks]]\n" + "".join(f"{key} = {toml_value(value)}\n"
                                          for key, value in task.items())
    return text
