"""What every `taskfleet` command shares: connecting, its flags, JSON output."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Awaitable
from dataclasses import asdict, is_dataclass
from typing import Any, TypeVar

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from taskfleet.clients.connection import StartupError, connect, load_connect_config
from taskfleet.core.names import DEFAULT_TASK_QUEUE, GIT_BATCH_WORKFLOW, MERGE_QUEUE_WORKFLOW

T = TypeVar("T")


def to_json(value: Any) -> str:
    return json.dumps(asdict(value) if is_dataclass(value) else value, indent=2, default=str)


async def client_for(args: argparse.Namespace) -> Client:
    return await connect(load_connect_config(args.address, args.namespace))


async def ask(call: Awaitable[T], what: str, workflow_id: str, repo: str = "") -> T:
    """The answer of a long-lived workflow the command names; if the server knows no such
    workflow, or no worker answers for it, one line saying which (exit code 2), not a traceback.
    With the `repo` it is for, a path that is no folder here is named too (a typo, or a clone only
    the worker's host has)."""
    try:
        return await call
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:  # it is there, but no worker answered for it
            raise StartupError(f"the {what} {workflow_id} did not answer: {err.message}") from None
        hint = ""
        if repo and not os.path.isdir(repo):
            hint = (f"; {repo} is not a folder here (give the clone's path as the worker "
                    "sees it)")
        raise StartupError(f"no {what} {workflow_id}: {err.message}{hint}") from None


def examples(*commands: str) -> dict[str, Any]:
    """`add_parser` keywords giving a command's `--help` a few real invocations to copy (each one
    parsed by tests/test_cli_help.py)."""
    text = "examples:\n" + "\n".join(f"  {command}" for command in commands)
    return {"epilog": text, "formatter_class": argparse.RawDescriptionHelpFormatter}


def add_connection_flags(parser: argparse.ArgumentParser, after_command: bool) -> None:
    """`--address`, `--namespace`, `--task-queue`, before the command (setting the defaults) or
    after it (where a flag left out must not overwrite the one given before)."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if after_command else value

    parser.add_argument(
        "--address", default=default(None),
        help="Temporal host:port (default: TEMPORAL_ADDRESS, a config profile, or localhost:7233)")
    parser.add_argument(
        "--namespace", default=default(None),
        help="Temporal namespace (default: TEMPORAL_NAMESPACE, a config profile, or default)")
    parser.add_argument("--task-queue",
                        default=default(os.environ.get("TASKFLEET_TASK_QUEUE", DEFAULT_TASK_QUEUE)),
                        help="the task queue taskfleet's workers poll (env TASKFLEET_TASK_QUEUE; "
                             "default taskfleet)")


def add_clone_flags(parser: argparse.ArgumentParser) -> None:
    """The clone a git batcher or merge queue serves: its path on the worker and its remote."""
    parser.add_argument("--repo", required=True, help="path of the clone, as the worker sees it")
    parser.add_argument("--remote", default="origin",
                        help="the remote it lands on (default origin)")


def add_batch_flags(parser: argparse.ArgumentParser, max_batch: int, max_wait: float, what: str,
                    old_names: tuple[str, str] | None = None) -> None:
    """The two settings every batching workflow has, one name each (`git` and `queue` alike), used
    only by the call that starts it; `old_names` stay accepted, unlisted."""
    parser.add_argument(
        "--max-batch", type=int, default=max_batch,
        help=f"at most this many {what} per batch, if this starts it (default {max_batch})")
    parser.add_argument("--max-wait-seconds", type=float, default=max_wait,
                        help=f"the longest the oldest of the {what} waits for a batch, if this "
                             f"starts it (default {max_wait:g})")
    if old_names:
        parser.add_argument(old_names[0], dest="max_batch", type=int, default=argparse.SUPPRESS,
                            help=argparse.SUPPRESS)
        parser.add_argument(old_names[1], dest="max_wait_seconds", type=float,
                            default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def add_json_flag(parser: argparse.ArgumentParser, what: str = "the answer") -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what} as JSON")


def not_a_run(workflow_id: str, workflow_type: str) -> str:
    """Why `status` and `cancel` refuse a workflow that is not a board run (a queue, a batcher)."""
    shown = {GIT_BATCH_WORKFLOW: "taskfleet git status",
             MERGE_QUEUE_WORKFLOW: "taskfleet queue status"}.get(workflow_type)
    return (f"{workflow_id} is a {workflow_type}, not a board run"
            + (f" (`{shown}` shows it)" if shown else ""))
