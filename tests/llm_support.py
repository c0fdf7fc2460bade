"""Shared by the LLM tests: the stand-in API with the worker environment pointing at it, and a way
to read every payload of a history as text."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from taskfleet.testing.standin import StandIn

FAST_POLLS = {"TASKFLEET_LLM_POLL_INITIAL_SECONDS": "0.2", "TASKFLEET_LLM_POLL_MAX_SECONDS": "0.5"}


@contextmanager
def standin_env() -> Iterator[StandIn]:
    """The stand-in, and this process's environment (which in-process workers read)
    pointing at it."""
    server = StandIn().start()
    saved = {k: os.environ.get(k) for k in [*server.env(), *FAST_POLLS]}
    os.environ.update({**server.env(), **FAST_POLLS})
    try:
        yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


def payload_text(history: Any) -> str:
    """Every payload of a history, decoded (the JSON form holds them base64-encoded)."""
    out: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "data" and isinstance(value, str):
                    try:
                        out.append(base64.b64decode(value).decode(errors="replace"))
                    except ValueError:
                        out.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(history.to_json_dict())
    return "\n".join(out)
