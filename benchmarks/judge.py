"""What a judge costs: N command tasks (each adds a 40-line file, a ~1.5 KB diff) with no judge, a
judge command (`judge_run`), a Claude judge batched and a Claude judge direct, on the offline
stand-in (no processing delay, so the wall time is taskfleet's own), then the batched board again
with the result cache on. Every task is approved, so each case is one judging per task.

Reports wall per task and what the judge adds to it, judge API calls, tokens and the estimated
cost per verdict (the stand-in counts about 4 characters a token; prices as `llm_pricing`: Sonnet,
batch half price). Prints JSON. `--quick`: 3 tasks.
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

TASK_QUEUE = "bench-judge"
# A 40-line Python file per task: a diff a reviewer reads in seconds.
WRITE = ("for i in $(seq 1 40); do echo \"value_$i = $i * 2  # line $i of $TASKFLEET_TASK_ID\"; "
         "done > \"gen_$TASKFLEET_TASK_ID.py\"")
JUDGE_COMMAND = 'grep -q "^+value_1 " && echo "approved: every line is a value"'


def board(n: int, case: str, refresh: bool) -> Board:
    judge = {"none": {}, "command": {"judge_run": JUDGE_COMMAND},
             "claude-batch": {"judge": "anthropic", "llm_batch": True},
             "claude-direct": {"judge": "anthropic", "llm_batch": False}}[case]
    tasks = [
        TaskSpec(id=f"j{i}", scope=f"generate gen_j{i}.py", run=WRITE,
                 verify="test -s gen_$TASKFLEET_TASK_ID.py", refresh=refresh, llm_batch_max_size=n,
                 llm_batch_max_age_seconds=5, timeout_seconds=600, **judge) for i in range(n)]
    return Board(tasks=tasks, name=f"bench-judge-{case}", max_parallel=n)


async def run_case(client, standin: StandIn, repo: Path, n: int, case: str,
                   refresh: bool = True) -> dict:
    before = dict(standin.calls)
    result, wall = await run_board(client, board(n, case, refresh), repo, task_queue=TASK_QUEUE,
                                   git_max_batch_size=100, git_max_batch_age_seconds=1)
    calls = {k: v - before.get(k, 0) for k, v in standin.calls.items()}
    s = result.stats
    verdicts = s.judge_approved + s.judge_revised + s.judge_rejected
    return {
        "case": case if refresh else f"{case}, cached",
        "tasks": n,
        "wall_seconds": round(wall, 3),
        "wall_ms_per_task": round(wall * 1000 / n, 1),
        "landed": sum(t.landed for t in result.tasks),
        "verdicts": verdicts,
        "judge_calls": s.judge_calls,
        "judge_cache_hits": s.judge_cache_hits,
        "judge_api_calls": s.judge_api_calls,
        "api_calls_seen_by_the_api":
            calls.get("batches.create", 0) + calls.get("messages.create", 0),
        "judge_input_tokens_per_verdict": round(s.judge_input_tokens / verdicts) if verdicts else 0,
        "judge_output_tokens_per_verdict":
            round(s.judge_output_tokens / verdicts) if verdicts else 0,
        "judge_cost_usd_per_verdict": round(s.judge_cost_usd / verdicts, 6) if verdicts else 0.0,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 tasks")
    args = parser.parse_args()
    n = 3 if args.quick else 20
    with tempfile.TemporaryDirectory(prefix="bench-judge-") as tmp, StandIn() as standin:
        os.environ.update({**standin.env(), "TASKFLEET_LLM_POLL_INITIAL_SECONDS": "0.05",
                           "TASKFLEET_LLM_POLL_MAX_SECONDS": "0.5"})
        fx = make_git_remote(Path(tmp) / "git")
        async with temporal_worker(TASK_QUEUE, Path(tmp) / "state",
                                   max_concurrent_activities=32) as client:
            await run_case(client, standin, fx.clone, 3, "none")  # warm-up (not reported)
            cases = [await run_case(client, standin, fx.clone, n, case)
                     for case in ("none", "command", "claude-batch", "claude-direct")]
            # Without refresh, twice: the first run fills the cache, the second reads it.
            cases.append(await run_case(client, standin, fx.clone, n, "claude-batch",
                                        refresh=False))
            cases.append(await run_case(client, standin, fx.clone, n, "claude-batch",
                                        refresh=False))
    cases.pop(-2)
    plain = cases[0]["wall_ms_per_task"]
    for case in cases[1:]:
        case["added_wall_ms_per_task"] = round(case["wall_ms_per_task"] - plain, 1)
    emit({"benchmark": "judge", "quick": args.quick, "stand_in_delay_seconds": 0, "cases": cases})


if __name__ == "__main__":
    run(main)
