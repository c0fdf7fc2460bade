"""What every `taskfleet` command shares: connecting, JSON output."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, is_dataclass
from typing import Any

from temporalio.client import Client

from taskfleet.clients.connection import connect, load_connect_config


def to_json(value: Any) -> str:
    return json.dumps(asdict(value) if is_dataclass(value) else value, indent=2, default=str)


async def client_for(args: argparse.Namespace) -> Client:
    return await connect(load_connect_config(args.address, args.namespace))


def examples(*commands: str) -> dict[str, Any]:
    """`add_parser` keywords giving a command's `--help` a few real invocations to copy
    (tests/test_cli_help.py parses every one of them with the real parser)."""
    text = "examples:\n" + "\n".join(f"  {command}" for command in commands)
    return {"epilog": text, "formatter_class": argparse.RawDescriptionHelpFormatter}
