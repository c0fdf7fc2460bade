"""The reference pages that are generated from the code, and what the others must name.

`make reference` writes the generated pages; tests/test_reference.py fails when a page and the code
disagree, so a flag, a board key or an environment variable added to the code reaches the docs.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("taskfleet", "workflows", "activities")
VARIABLE = re.compile(r"\bTASKFLEET_[A-Z0-9_]*[A-Z0-9]\b")


def variables_in_code() -> set[str]:
    """Every `TASKFLEET_*` name in the product's string literals (help texts included)."""
    found: set[str] = set()
    for folder in PRODUCT:
        for path in (ROOT / folder).rglob("*.py"):
            if "testing" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    found.update(VARIABLE.findall(node.value))
    return found


def variables_in_page(path: Path) -> set[str]:
    return set(VARIABLE.findall(path.read_text()))


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    value = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings)


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, "", argparse.SUPPRESS, False) or action.required:
        return "required" if action.required else ""
    return f"`{action.default}`"


def cli_reference() -> str:
    """docs/reference/cli.md: every command and every flag, from the parser itself."""
    from taskfleet.cli.main import build_parser, leaf_commands

    parser = build_parser()
    lines = ["# The taskfleet command: every flag", "",
             "Generated from the command's own parser (`make reference`); [The taskfleet command](../cli.md)",
             "shows how the commands are used. The connection flags (`--address`, `--namespace`,",
             "`--task-queue`) go before or after the command.", ""]
    for words, command in leaf_commands(parser).items():
        lines += [f"## taskfleet {' '.join(words)}", "", command.description or _help_of(parser, words), "",
                  "| argument | default | what |", "| --- | --- | --- |"]
        for action in command._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            text = (action.help or "").replace("|", "\\|") % {"default": action.default}
            lines.append(f"| {_flags(action)} | {_default(action)} | {text} |")
        lines.append("")
    return "\n".join(lines)


def _help_of(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> str:
    """The help a command was given in its parent's list of commands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == words[0]:
                    if len(words) == 1:
                        return choice.help or ""
                    return _help_of(action.choices[words[0]], words[1:])
    return ""


def board_keys_reference() -> str:
    """docs/reference/board-keys.md: the key registry the board parser itself uses."""
    from taskfleet.core.boards import keys_table

    return "\n".join([
        "# Board keys", "",
        "Every key a board may set, from the registry the board parser uses (`make reference`).",
        "**Scope**: `board`, a board-wide setting; `task`, a task's own; `both`, a task's own that the",
        "board may set for every task that does not. A TOML board names them as written; a markdown board",
        "gets its board-wide settings from the command line (see [Boards](../boards.md)).", "",
        keys_table(),
    ])


GENERATED = {"docs/reference/cli.md": cli_reference, "docs/reference/board-keys.md": board_keys_reference}


def main() -> None:
    for name, render in GENERATED.items():
        (ROOT / name).write_text(render() + "\n")
        print(f"wrote {name}", file=sys.stderr)


if __name__ == "__main__":
    main()
