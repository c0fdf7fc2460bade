"""Client side of the run store: stream every task outcome of a run without holding them all (the
workflow keeps only counters, failed ids up to a cap and the store's ref)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any, TextIO

from taskfleet.core.models.orchestrator import OrchestratorProgress, OrchestratorResult
from taskfleet.core.run_store import RunStoreError, iter_outcomes, run_ref

__all__ = ["RunStoreError", "iter_run_outcomes", "run_outcomes", "run_ref", "write_json_with_tasks",
           "write_result_json", "write_status_json"]


def iter_run_outcomes(repo: str, ref: str) -> Iterator[dict[str, Any]]:
    """Every recorded outcome of the run, as the JSON objects `run --json` prints, oldest first."""
    return iter_outcomes(repo, ref)


def write_json_with_tasks(out: TextIO, head: dict[str, Any], tasks: Iterator[dict[str, Any]],
                          tail: dict[str, Any], indent: int = 2) -> int:
    """Print `{**head, "tasks": [...], **tail}` as `json.dumps(..., indent=2)` would, one task at a
    time, without building it; returns how many tasks were written."""
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


def run_outcomes(repo: str, ref: str) -> Iterator[dict[str, Any]]:
    """Stored outcomes as `run --json` lists tasks (TaskOutcome fields, without the board row)."""
    for outcome in iter_outcomes(repo, ref):
        outcome.pop("row", None)
        yield outcome


def write_result_json(out: TextIO, result: OrchestratorResult, workflow_id: str = "") -> int:
    """`run --json`: the result object (and the run's `workflow_id`, for `status` and `cancel`); a
    big run's `tasks` streamed from its run store."""
    data = asdict(result)
    if workflow_id:
        data["workflow_id"] = workflow_id
    tasks = data.pop("tasks")
    if not result.run_ref or len(tasks) >= result.recorded:
        out.write(json.dumps({"tasks": tasks, **data}, indent=2) + "\n")
        return len(tasks)
    return write_json_with_tasks(out, {}, run_outcomes(result.repo, result.run_ref), data)


def _with_recent(stored: Iterator[dict[str, Any]],
                 recent: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every stored outcome, then the recently finished tasks not yet in the store (a few dozen,
    from `progress`), so a running run's fresh failure shows at once."""
    unseen = {t["id"]: t for t in recent}
    for outcome in stored:
        unseen.pop(outcome.get("id"), None)
        yield outcome
    yield from unseen.values()


def write_status_json(out: TextIO, state: str, progress: OrchestratorProgress,
                      result: OrchestratorResult | None = None, workflow_id: str = "") -> int:
    """`status --json`: state, progress and every outcome, from a finished run's result when it
    holds them all, else from the run store (plus tasks in flight)."""
    data = asdict(progress)
    data.pop("tasks")
    head = {"status": state, "counts": data.pop("counts"), "running": data.pop("running"),
            **({"workflow_id": workflow_id} if workflow_id else {})}
    tail = {**data, **({"stats": asdict(result.stats)} if result is not None else {})}
    if result is not None and result.tasks and len(result.tasks) >= result.recorded:
        # A finished run whose result holds every outcome: those, in board order.
        tasks: Iterator[dict[str, Any]] = iter([asdict(t) for t in result.tasks])
    elif not progress.run_ref:  # an older version's inline run: its tasks are in progress
        tasks = iter([asdict(t) for t in progress.tasks] if result is None else [])
    else:
        finished = run_outcomes(progress.repo, progress.run_ref)
        if result is None:  # running: the store, the finished not yet stored, the in flight
            finished = _with_recent(finished, [asdict(t) for t in progress.tasks
                                               if t.status not in ("pending", "running")])
        in_flight = ((asdict(t) for t in progress.tasks if t.status in ("pending", "running"))
                     if result is None else iter(()))
        tasks = itertools.chain(finished, in_flight)
    return write_json_with_tasks(out, head, tasks, tail)
