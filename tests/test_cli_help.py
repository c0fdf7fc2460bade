"""Every `taskfleet` command's `--help` shows examples to copy,
and every example parses as written."""

from __future__ import annotations

import argparse
import shlex
import subprocess
from pathlib import Path

from taskfleet.cli.main import build_parser, leaf_commands
from tests.user_cli import TASKFLEET


def test_every_command_has_examples_that_parse():
    parser = build_parser()
    commands = leaf_commands(parser)
    assert ("run",) in commands and ("git", "enqueue") in commands and ("queue", "add") in commands
    for words, command in commands.items():
        epilog = command.epilog or ""
        assert epilog.startswith("examples:\n"), (
            f"taskfleet {' '.join(words)} --help has no examples")
        for line in epilog.splitlines()[1:]:
            argv = shlex.split(line.strip())
            assert argv[0] == "taskfleet", line
            args = build_parser().parse_args(argv[1:])  # exits (SystemExit) on a bad example
            assert tuple(a for a in argv[1:] if a in words) == words, (line, words)
            assert args is not None


def test_help_prints_the_examples_from_the_installed_command():
    done = subprocess.run([TASKFLEET, "queue", "add", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "examples:\n  taskfleet queue add feature/a --repo /srv/clone" in done.stdout


def test_every_flag_of_every_command_says_what_it_does():
    for words, command in leaf_commands(build_parser()).items():
        for action in command._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, (f"taskfleet {' '.join(words)}: "
                                     f"{action.option_strings or action.dest} has no help")


def test_connection_flags_go_before_or_after_the_command():
    parser = build_parser()
    before = parser.parse_args(
        ["--address", "h:1", "--task-queue", "q", "git", "status", "--repo", "r"])
    after = parser.parse_args(
        ["git", "status", "--repo", "r", "--address", "h:1", "--task-queue", "q"])
    assert (before.address, before.task_queue) == (after.address, after.task_queue) == ("h:1", "q")
    # A flag given before the command is not undone by leaving it out after it.
    assert parser.parse_args(["--namespace", "ns", "status", "X"]).namespace == "ns"


def test_git_and_queue_call_one_setting_by_one_name_and_keep_the_old_spellings():
    parser = build_parser()
    git = parser.parse_args(["git", "enqueue", "feature/a", "--repo", "r", "--max-batch", "3",
                             "--max-wait-seconds", "9"])
    queue = parser.parse_args(["queue", "add", "feature/a", "--repo", "r", "--max-batch", "3",
                               "--max-wait-seconds", "9"])
    assert ((git.max_batch, git.max_wait_seconds) == (queue.max_batch, queue.max_wait_seconds)
            == (3, 9.0))
    old = parser.parse_args(["git", "enqueue", "--branch", "feature/a", "--repo", "r",
                             "--max-batch-size", "4", "--max-batch-age-seconds", "7"])
    assert (old.branch, old.max_batch, old.max_wait_seconds) == ("feature/a", 4, 7.0)
    help_text = leaf_commands(parser)[("git", "enqueue")].format_help()
    assert "--max-batch-size" not in help_text and "--max-batch " in help_text


def test_starting_flags_appear_only_where_they_start_something():
    commands = leaf_commands(build_parser())
    for words in (("queue", "status"), ("queue", "flush"), ("queue", "id"), ("git", "status"),
                  ("git", "id"), ("git", "flush")):
        flags = {s for a in commands[words]._actions for s in a.option_strings}
        assert not flags & {"--verify", "--max-batch", "--max-wait-seconds", "--atomic"}, words


def test_both_commands_print_their_version():
    from importlib.metadata import version

    for command in (TASKFLEET, str(Path(TASKFLEET).with_name("taskfleet-worker"))):
        done = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().endswith(version("taskfleet")), done.stdout
