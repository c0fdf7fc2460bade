"""Every `taskfleet` command's `--help` shows examples to copy, and every example parses as written."""

from __future__ import annotations

import argparse
import shlex
import subprocess

from taskfleet.cli.main import build_parser
from tests.user_cli import TASKFLEET


def leaf_commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command that takes no further subcommand, by its words (`("git", "enqueue")`)."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(leaf_commands(sub, path + (name,)))
    return found or {path: parser}


def test_every_command_has_examples_that_parse():
    parser = build_parser()
    commands = leaf_commands(parser)
    assert ("run",) in commands and ("git", "enqueue") in commands and ("queue", "add") in commands
    for words, command in commands.items():
        epilog = command.epilog or ""
        assert epilog.startswith("examples:\n"), f"taskfleet {' '.join(words)} --help has no examples"
        for line in epilog.splitlines()[1:]:
            argv = shlex.split(line.strip())
            assert argv[0] == "taskfleet", line
            args = build_parser().parse_args(argv[1:])  # exits (SystemExit) on a bad example
            assert tuple(a for a in argv[1:] if a in words) == words, (line, words)
            assert args is not None


def test_help_prints_the_examples_from_the_installed_command():
    done = subprocess.run([TASKFLEET, "queue", "add", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "examples:\n  taskfleet queue add feature/a --repo /srv/clone" in done.stdout
