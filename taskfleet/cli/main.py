"""The `taskfleet` command line: drive the git batcher and merge queues, run boards, query lessons,
run the demo."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

import taskfleet
from taskfleet.cli import demo, git, lessons, payloads, plan, queue
from taskfleet.cli import run as board_commands
from taskfleet.cli.common import add_connection_flags
from taskfleet.clients.connection import StartupError

# --- entry point ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="taskfleet", description=__doc__)
    parser.add_argument("--version", action="version", version=f"taskfleet {taskfleet.__version__}")
    add_connection_flags(parser, after_command=False)
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (git, queue, board_commands, plan, lessons, payloads, demo):
        group.add_commands(sub)
    for command in leaf_commands(parser).values():  # `taskfleet status X --address H` as well
        add_connection_flags(command, after_command=True)
    return parser


def leaf_commands(parser: argparse.ArgumentParser,
                  path: tuple[str, ...] = ()) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command that takes no further subcommand, by its words (`("git", "enqueue")`)."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(leaf_commands(sub, path + (name,)))
    return found or {path: parser}


def _one_line(err: BaseException) -> str:
    text = (err.message if isinstance(err, RPCError) else str(err)).strip()
    return text.splitlines()[0] if text else type(err).__name__


def run(argv: list[str] | None = None) -> int:
    """Run one command. Whatever the server refuses is one line on stderr and exit code 2."""
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(args.func(args))
    except StartupError as err:
        print(f"taskfleet: {err}", file=sys.stderr)
        return 2
    except RPCError as err:
        print(f"taskfleet: the server refused: {_one_line(err)} ({err.status.name})",
              file=sys.stderr)
        return 2
    except WorkflowAlreadyStartedError as err:
        print(f"taskfleet: {err.workflow_id} is already running", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `taskfleet run --json | head -1`: the reader is gone, and there is nowhere to say more.
        _silence_stdout()
        return 0
    except KeyboardInterrupt:
        return 130


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: list[str] | None = None) -> None:
    """Console entry point; exits without interpreter finalization (output flushed first): CPython
    aborts if the Temporal client's native threads, still winding down, touch it then."""
    code = run(argv)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
