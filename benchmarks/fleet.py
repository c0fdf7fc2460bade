"""A Claude fleet: N Claude tasks, each reviewed by a Claude judge and shown one context file, all
at once (`max_parallel` = N, batched, `llm_batch_max_age_seconds` 30), on the offline stand-in; then
the same board with 2 KB contexts. Prompts, replies and edits live in the payload store, so what a
task costs in workflow history does not grow with its prompt.

Prints JSON with each board's figures and the floors: every task lands, no run terminated, no run's
history over 4 MB, at most 20 KB of history per task (every workflow's runs on the board's task
queue, summed), implementer and judge requests in at most 3 Message Batches each per round, and the
2 KB board's wall within 1.2x of the 200 KB board's. The stand-in runs in a process of its own, so
the worker's CPU is the worker's. `--quick`: 10 tasks per board, batches flushed after 2 s; the
per-task history floor is then not judged (the run's fixed events spread over 10 tasks, not 1,000).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import tempfile
import time
from pathlib import Path

from common import EXTRA_SERVER_ARGS, cpu_ms_per_task, cpu_seconds, emit, run, run_board
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from taskfleet.core.models.orchestrator import Board, TaskSpec
from taskfleet.core.search_attributes import ALL
from taskfleet.core.settings import TaskfleetSettings
from taskfleet.devserver.server import find_temporal_cli
from taskfleet.plugin import TaskfleetPlugin
from taskfleet.testing import git, make_git_remote
from taskfleet.testing.standin import StandIn

FILES = 10  # context files on the base; task i reads file i % FILES
FLOORS = {
    "largest_run_history_bytes": 4_000_000,
    "history_bytes_per_task": 20_000,
    "implementer_batches_per_round": 3,
    "judge_batches_per_round": 3,
}


def prose(size: int, seed: int) -> str:
    """Text of `size` bytes that reads like a spec (words, lines), different for each file."""
    rnd, words, out = random.Random(seed), [f"term{i}" for i in range(4000)], []
    while sum(map(len, out)) < size:
        out.append(" ".join(rnd.choice(words) for _ in range(12)) + "\n")
    return "".join(out)[:size]


def repo_with_context(root: Path, size: int):
    fx = make_git_remote(root)
    for i in range(FILES):
        fx.change(fx.clone, f"spec/part{i}.txt", prose(size, i))
    git(fx.clone, "add", "spec")
    git(fx.clone, "commit", "-qm", "the spec")
    git(fx.clone, "push", "-q", "origin", "HEAD")
    return fx


async def histories(client, task_queue: str) -> tuple[int, int, int, int]:
    """(bytes, the largest run's bytes, runs, terminated runs) of every run on the task queue."""
    total = largest = runs = terminated = 0
    async for wf in client.list_workflows(f"TaskQueue = '{task_queue}'"):
        history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        size = sum(event.ByteSize() for event in history.events)
        total, largest, runs = total + size, max(largest, size), runs + 1
        terminated += wf.status.name == "TERMINATED"
    return total, largest, runs, terminated


class StandInProcess:
    """The stand-in in a process of its own, as the API is: its parsing of 200 MB batches never
    holds the worker's interpreter. Started (forked) before any Temporal thread exists."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("fork")
        self.conn, child = context.Pipe()
        self.proc = context.Process(target=_serve, args=(child,), daemon=True)
        self.proc.start()
        self.env: dict[str, str] = self.conn.recv()

    def seen(self) -> dict:
        self.conn.send("seen")
        return self.conn.recv()

    def stop(self) -> None:
        self.conn.send("stop")
        self.proc.join(30)


def _serve(conn) -> None:
    with StandIn() as standin:
        conn.send(standin.env())
        while conn.recv() == "seen":
            tools = {r["custom_id"]: r["tool"] for r in standin.requests if r["via"] == "batch"}
            conn.send({"batches": standin.batch_contents(), "tools": tools})


def batches_per_round(seen: dict, first: int) -> tuple[int, int]:
    """Message Batches (from the `first`-th on) holding first-attempt implementer requests, and
    those holding judge requests."""
    tools, implementer, judge = seen["tools"], 0, 0
    for ids in seen["batches"][first:]:
        implementer += any(tools.get(i) == "apply_edits" and i.endswith("-a1") for i in ids)
        judge += any(tools.get(i) == "submit_review" for i in ids)
    return implementer, judge


async def run_board_case(
    client, standin: StandInProcess, root: Path, n: int, size: int, age: float
) -> dict:
    fx = repo_with_context(root / f"git-{size}", size)
    queue = f"fleet-{size}"
    tasks = [
        TaskSpec(
            id=f"c{i}",
            scope=f"write llm/c{i}.txt",
            implementer="anthropic",
            judge="anthropic",
            context=[f"spec/part{i % FILES}.txt"],
            refresh=True,
            verify="test -f llm/$TASKFLEET_TASK_ID.txt",
            llm_batch_max_age_seconds=age,
            timeout_seconds=900,
        )
        for i in range(n)
    ]
    first, before = len(standin.seen()["batches"]), cpu_seconds()
    plugin = TaskfleetPlugin(TaskfleetSettings(state_dir=root / f"state-{size}"))
    async with Worker(client, task_queue=queue, plugins=[plugin]):
        board = Board(tasks=tasks, name=f"fleet-{size}", max_parallel=n)
        result, wall = await run_board(
            client,
            board,
            fx.clone,
            task_queue=queue,
            git_max_batch_size=100,
            git_max_batch_age_seconds=2,
        )
    cpu = cpu_ms_per_task(before, cpu_seconds(), n)
    total, largest, runs, terminated = await histories(client, queue)
    seen = standin.seen()
    implementer, judge = batches_per_round(seen, first)
    payloads = (root / f"state-{size}" / "payloads").rglob("*")
    stored = sum(p.stat().st_size for p in payloads if p.is_file())
    return {
        "tasks": n,
        "context_bytes": size,
        "wall_seconds": round(wall, 1),
        "landed": sum(t.landed for t in result.tasks),
        "terminated_runs": terminated,
        "runs": runs,
        "history_bytes": total,
        "history_bytes_per_task": total // n,
        "largest_run_history_bytes": largest,
        "implementer_batches_per_round": implementer,
        "judge_batches_per_round": judge,
        "batch_sizes": [len(b) for b in seen["batches"][first:]],
        "cpu_ms_per_task": cpu,
        "payload_store_bytes_per_task": stored // n,
    }


def floors(big: dict, small: dict, quick: bool) -> dict:
    out = {}
    for name, limit in FLOORS.items():
        worst = max(big[name], small[name])
        judged = not (quick and name == "history_bytes_per_task")
        out[name] = {"value": worst, "floor": limit, "met": worst <= limit if judged else None}
    out["every_task_lands"] = {
        "value": big["landed"] + small["landed"],
        "floor": big["tasks"] + small["tasks"],
        "met": big["landed"] == big["tasks"] and small["landed"] == small["tasks"],
    }
    out["no_run_terminated"] = {
        "value": big["terminated_runs"] + small["terminated_runs"],
        "floor": 0,
        "met": not (big["terminated_runs"] or small["terminated_runs"]),
    }
    ratio = small["wall_seconds"] / big["wall_seconds"]
    out["wall_2kb_over_200kb"] = {
        "value": round(ratio, 3),
        "floor": 1.2,
        "met": 1 / 1.2 <= ratio <= 1.2,
    }
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="10 tasks per board, 2 s batch age")
    parser.add_argument(
        "--tasks", type=int, default=0, help="tasks per board (default 1000, quick 10)"
    )
    args = parser.parse_args()
    n = args.tasks or (10 if args.quick else 1000)
    age = 2.0 if args.quick else 30.0
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    load = os.getloadavg()
    standin = StandInProcess()
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        os.environ.update(
            {
                **standin.env,
                "TASKFLEET_LLM_POLL_INITIAL_SECONDS": "0.2",
                "TASKFLEET_LLM_POLL_MAX_SECONDS": "2",
            }
        )
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=find_temporal_cli(),
            search_attributes=ALL,
            dev_server_log_level="error",
            dev_server_extra_args=EXTRA_SERVER_ARGS,
        )
        try:
            big = await run_board_case(env.client, standin, Path(tmp), n, 200_000, age)
            small = await run_board_case(env.client, standin, Path(tmp), n, 2_000, age)
        finally:
            await env.shutdown()
            standin.stop()
    emit(
        {
            "benchmark": "fleet",
            "quick": args.quick,
            "started": started,
            "load_average_at_start": [round(x, 2) for x in load],
            "llm_batch_max_age_seconds": age,
            "floors": floors(big, small, args.quick),
            "boards": [big, small],
        }
    )


if __name__ == "__main__":
    run(main)
