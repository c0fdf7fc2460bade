"""Claude requests batched vs direct: 3, 30 and 300 LLM tasks on the offline stand-in (no processing
delay, so the wall time is all taskfleet's own: workflows, activities, worktrees, verification,
commits, landing). Reports API calls each way and wall time per request (tasks run all at once, so
this is amortized overhead, not one request's latency). Batches hold at most 100 requests (the
default `llm_batch_max_size`), and `max_parallel` = N so every task is queued at once: a task
waiting for its batch holds an orchestrator slot but no worker. Prints JSON. `--quick`: 3 and 10.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from common import emit, run, run_board, temporal_worker

from taskfleet.core.models.orchestrator import Board, TaskSpec
from taskfleet.testing import make_git_remote
from taskfleet.testing.standin import StandIn

TASK_QUEUE = "bench-llm"


async def run_case(client, standin: StandIn, repo: Path, n: int, batched: bool) -> dict:
    before = dict(standin.calls)
    tasks = [TaskSpec(id=f"q{i}", scope=f"write llm/q{i}.txt", implementer="anthropic",
                      verify="test -f llm/$TASKFLEET_TASK_ID.txt", refresh=True, llm_batch=batched,
                      llm_batch_max_size=min(n, 100), llm_batch_max_age_seconds=5,
                      timeout_seconds=600) for i in range(n)]
    result, wall = await run_board(
        client, Board(tasks=tasks, name=f"bench-llm-{n}", max_parallel=n), repo,
        task_queue=TASK_QUEUE, git_max_batch_size=100, git_max_batch_age_seconds=2)
    calls = {k: v - before.get(k, 0) for k, v in standin.calls.items()}
    return {
        "tasks": n,
        "mode": "batch" if batched else "direct",
        "api_calls": calls.get("batches.create", 0) + calls.get("messages.create", 0),
        "batch_creates": calls.get("batches.create", 0),
        "direct_calls": calls.get("messages.create", 0),
        "polls": calls.get("batches.retrieve", 0),
        "llm_requests": result.stats.llm_requests,
        "wall_seconds": round(wall, 3),
        "workflow_wall_seconds": result.stats.wall_seconds,
        "wall_ms_per_request": round(wall * 1000 / n, 1),
        "succeeded": sum(t.status == "succeeded" for t in result.tasks),
        "landed": sum(t.landed for t in result.tasks),
        "pushes": result.stats.pushes,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 and 10 tasks only")
    args = parser.parse_args()
    sizes = [3, 10] if args.quick else [3, 30, 300]
    with tempfile.TemporaryDirectory(prefix="bench-llm-") as tmp, StandIn() as standin:
        os.environ.update({**standin.env(), "TASKFLEET_LLM_POLL_INITIAL_SECONDS": "0.05",
                           "TASKFLEET_LLM_POLL_MAX_SECONDS": "0.5"})
        fx = make_git_remote(Path(tmp) / "git")
        cases = []
        async with temporal_worker(TASK_QUEUE, Path(tmp) / "state",
                                   max_concurrent_activities=32) as client:
            await run_case(client, standin, fx.clone, 3, True)  # warm-up (not reported)
            for n in sizes:
                for batched in (True, False):
                    cases.append(await run_case(client, standin, fx.clone, n, batched))
    summary = {
        str(c["tasks"]): {"batched_api_calls": c["api_calls"], "direct_api_calls": d["api_calls"],
                          "batched_wall_ms_per_request": c["wall_ms_per_request"],
                          "direct_wall_ms_per_request": d["wall_ms_per_request"]}
        for c, d in zip(cases[::2], cases[1::2])
    }
    emit({"benchmark": "llm_batching", "quick": args.quick, "stand_in_delay_seconds": 0,
          "summary": summary, "cases": cases})


if __name__ == "__main__":
    run(main)
