"""Measuring at fleet scale (tests, `benchmarks/scale.py`): no-op boards of any size, which show
what the orchestrator costs per task, and what a run's recorded history weighs, read across every
run of a workflow one event at a time."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.message import Message
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

# No payload in a run's history over this, whatever the board's size: far under the server's 2 MB.
PAYLOADS_LIMIT_BYTES = 256 * 1024
_EVENT_TYPES = HistoryEvent.DESCRIPTOR.fields_by_name["event_type"].enum_type


def write_noop_board(path: Path | str, tasks: int, max_parallel: int = 100, name: str = "noop",
                     bad_rows: dict[int, str] | None = None, prefix: str = "n") -> Path:
    """A TOML board of `tasks` no-op tasks, written a line at a time; `bad_rows` maps a 0-based
    index to TOML lines replacing that task's `run` line (a task that cannot run as written)."""
    path = Path(path)
    bad_rows = bad_rows or {}
    with open(path, "w", encoding="utf-8") as out:
        out.write(f'name = "{name}"\nmax_parallel = {max_parallel}\nworktree = false\n'
                  'verify = "true"\n\n')
        for i in range(tasks):
            run_line = bad_rows.get(i, 'run = "true"')
            out.write(f'[[tasks]]\nid = "{prefix}{i}"\n{run_line}\n\n')
    return path


@dataclass
class RunHistory:
    run_id: str
    events: int = 0
    bytes: int = 0
    largest_payload_bytes: int = 0  # the largest Payloads of one event (an input, a result, ...)
    largest_payload_event: str = ""  # "<event id> <event type>"


@dataclass
class HistoryFigures:
    """A workflow's whole chain of runs, as the scale floors measure it."""

    runs: list[RunHistory] = field(default_factory=list)

    @property
    def largest_history_events(self) -> int:
        return max((r.events for r in self.runs), default=0)

    @property
    def largest_history_bytes(self) -> int:
        return max((r.bytes for r in self.runs), default=0)

    @property
    def largest_payload(self) -> RunHistory | None:
        return max(self.runs, key=lambda r: r.largest_payload_bytes, default=None)

    @property
    def largest_payload_bytes(self) -> int:
        run = self.largest_payload
        return run.largest_payload_bytes if run else 0

    def as_dict(self) -> dict:
        run = self.largest_payload
        return {"runs": len(self.runs), "largest_history_events": self.largest_history_events,
                "largest_history_bytes": self.largest_history_bytes,
                "largest_payload_bytes": self.largest_payload_bytes,
                "largest_payload_event": f"run {run.run_id[:8]} event {run.largest_payload_event}"
                if run else ""}


def payloads_sizes(message: Message) -> Iterable[int]:
    """The size of every `Payloads` (or lone `Payload`) inside a protobuf message, recursively."""
    name = message.DESCRIPTOR.full_name
    if name == "temporal.api.common.v1.Payloads" or name == "temporal.api.common.v1.Payload":
        yield message.ByteSize()
        return
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        if isinstance(value, Message):
            yield from payloads_sizes(value)
            continue
        # a repeated field, or a map (whose values may be messages)
        for item in value.values() if hasattr(value, "values") else value:
            if isinstance(item, Message):
                yield from payloads_sizes(item)


def measure_events(run_id: str, events: Iterable[HistoryEvent]) -> RunHistory:
    figures = RunHistory(run_id=run_id)
    for event in events:
        figures.events += 1
        figures.bytes += event.ByteSize()
        largest = max(payloads_sizes(event), default=0)
        if largest > figures.largest_payload_bytes:
            figures.largest_payload_bytes = largest
            figures.largest_payload_event = (
                f"{event.event_id} {_EVENT_TYPES.values_by_number[event.event_type].name}")
    return figures


async def _measure_run(client: Client, workflow_id: str,
                       run_id: str | None) -> tuple[RunHistory, str]:
    """One run's figures, and the run it continued from ("" for the first)."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    figures = RunHistory(run_id=run_id or "")
    previous = ""
    first = True
    async for event in handle.fetch_history_events():
        if first:
            attributes = event.workflow_execution_started_event_attributes
            previous = attributes.continued_execution_run_id
            figures.run_id = figures.run_id or attributes.original_execution_run_id
            first = False
        one = measure_events(figures.run_id, [event])
        figures.events += 1
        figures.bytes += one.bytes
        if one.largest_payload_bytes > figures.largest_payload_bytes:
            figures.largest_payload_bytes, figures.largest_payload_event = (
                one.largest_payload_bytes, one.largest_payload_event)
    return figures, previous


async def run_chain(client: Client, workflow_id: str) -> AsyncIterator[RunHistory]:
    """Figures of every run of `workflow_id`, newest first (one run's events at a time)."""
    run_id: str | None = None
    while True:
        figures, previous = await _measure_run(client, workflow_id, run_id)
        yield figures
        if not previous:
            return
        run_id = previous


async def history_figures(client: Client, workflow_id: str) -> HistoryFigures:
    figures = HistoryFigures()
    async for run in run_chain(client, workflow_id):
        figures.runs.append(run)
    figures.runs.reverse()
    return figures


def page_starts(repo: str, board_id: str, pages: int) -> list[int]:
    """The first row of each of a stored board's first `pages` pages, as the orchestrator loads them
    (page sizes follow the byte budget)."""
    from taskfleet.core.board_store import read_page
    from taskfleet.core.models.board_store import BoardPageRequest

    starts, start = [], 0
    while len(starts) < pages:
        page = read_page(BoardPageRequest(repo=repo, board_id=board_id, start=start))
        starts.append(start)
        if page.next >= page.total:
            break
        start = page.next
    return starts
