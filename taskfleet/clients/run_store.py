"""Client side of the run store: stream every task's outcome of a run, without holding them all.

`taskfleet status --json` and `taskfleet run --json` print a run's `tasks` from here: the workflow
keeps only counters, failed ids up to a cap and the store's ref.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TextIO

from taskfleet.core.run_store import RunStoreError, iter_outcomes, run_ref

__all__ = ["RunStoreError", "iter_run_outcomes", "run_ref", "write_json_with_tasks"]


def iter_run_outcomes(repo: str, ref: str) -> Iterator[dict[str, Any]]:
    """Every recorded outcome of the run, as the JSON objects `run --json` prints, oldest first."""
    return iter_outcomes(repo, ref)


def write_json_with_tasks(out: TextIO, head: dict[str, Any], tasks: Iterator[dict[str, Any]], tail: dict[str, Any],
                          indent: int = 2) -> int:
    """Print `{**head, "tasks": [...], **tail}` as indented JSON, one task at a time; tasks written.

    The same text `json.dumps(..., indent=2)` prints for the whole object, without building it.
    """
    pad = " " * indent
    out.write("{\n")
    for key, value in head.items():
        out.write(f"{pad}{json.dumps(key)}: {_nested(value, indent)},\n")
    out.write(f'{pad}"tasks": [')
    count = 0
    for task in tasks:
        out.write(("," if count else "") + f"\n{pad * 2}{_nested(task, indent * 2)}")
        count += 1
    out.write(f"\n{pad}]" if count else "]")
    for key, value in tail.items():
        out.write(f",\n{pad}{json.dumps(key)}: {_nested(value, indent)}")
    out.write("\n}\n")
    return count


def _nested(value: Any, depth: int) -> str:
    """`value` as indented JSON, placed `depth` spaces in."""
    return json.dumps(value, indent=2).replace("\n", "\n" + " " * depth)
