"""Orchestrator dispatch against the bare SDK, in one run: N tasks of d seconds at concurrency c.

Each case runs the same tasks through taskfleet (a board on the real server and worker) and
through `sdk_baseline.BaselineDispatch` (a bare workflow starting the same two processes per task),
alternating which goes first, on the same dev server and in the same process. Efficiency =
ceil(N / c) * d / wall; what is taskfleet's is the ratio taskfleet / baseline (the machine sets the
absolute floor). Cases with worktrees compare against the same task written with the bare SDK
(`worktree_commit_push`: a worktree on its own branch, the two processes, a commit and a push of
the branch per task); the ratio against a baseline that only adds and removes a worktree (no
commit, no push) is printed beside it. The branches a baseline run made are deleted after it,
untimed, so every run meets a clone and a remote of the same size. Every taskfleet task runs with
`refresh` (no result cache).

`ratio_with_over_without_worktrees` is taskfleet's own efficiency with worktrees over without, per
case measured both ways; `git_work_floor` times, alone, the git work a with-worktrees task adds (its
`add -A` + `commit`, and one push of the run's branches), and `..._best_possible` is the ratio that
work alone would leave if every signal, activity and claim cost nothing.

`cpu_ms_per_task` says, per side, where the CPU went (the worker process with all its threads,
the commands and git processes it reaped, the dev server): on 2 cores a side cannot run its tasks
faster than its CPU allows, whatever the scheduling.

Also: 1,000 no-op tasks (ms per task) and, in full mode, a 2,000-task board under a forced small
history limit. Prints JSON, with the load average.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import sdk_baseline
from common import (
    cpu_ms_per_task,
    cpu_seconds,
    emit,
    landing_tail_seconds,
    run,
    run_board,
    temporal_worker,
)

from taskfleet.core.models.orchestrator import Board, TaskSpec
from taskfleet.testing import make_git_remote

TASK_QUEUE = "bench-dispatch"
BASELINE_QUEUE = "bench-dispatch-baseline"


async def run_case(client, repo: Path, n: int, seconds: float, concurrency: int,
                   worktree: bool = False, max_history_events: int = 0) -> dict:
    command = f"sleep {seconds}" if seconds else "true"
    if worktree:
        command += ' && echo "$TASKFLEET_TASK_ID" > done.txt'
    # refresh: every run does the work (the result cache would otherwise answer repeated runs).
    tasks = [TaskSpec(id=f"t{i}", run=command, verify="true", worktree=worktree,
                      timeout_seconds=600, refresh=True) for i in range(n)]
    handles: list = []
    result, wall = await run_board(
        client, Board(tasks=tasks, name=f"bench-{n}", max_parallel=concurrency), repo,
        handles=handles, task_queue=TASK_QUEUE, max_history_events=max_history_events,
        git_max_batch_age_seconds=60)
    tail = await landing_tail_seconds(handles[0]) if worktree else 0.0
    ideal = math.ceil(n / concurrency) * seconds
    failed = [t.id for t in result.tasks if t.status != "succeeded"]
    return {
        "tasks": n,
        "task_seconds": seconds,
        "concurrency": concurrency,
        "worktrees": worktree,
        "wall_seconds": round(wall, 3),
        "workflow_wall_seconds": result.stats.wall_seconds,
        "ideal_seconds": round(ideal, 3),
        "efficiency": round(ideal / wall, 3) if ideal else None,
        "overhead_ms_per_task": round((wall - ideal) * 1000 / n, 2),
        "avg_task_activity_seconds": round(sum(t.seconds for t in result.tasks) / n, 4),
        "max_running_observed": result.stats.max_running,
        "failed": len(failed),
        "history_runs": result.stats.runs,
        "largest_history_length": result.stats.largest_history_length,
        "pushes": result.stats.pushes,
        # Task done -> its landing reported (the run's `stats.landing_seconds`), per landed task.
        "landing_overhead_ms_per_task": round(
            result.stats.landing_seconds * 1000 / max(1, sum(t.landed for t in result.tasks)), 2),
        # What landing adds to the wall: the last task done -> the run's end, in all and per task.
        "landing_tail_ms": round(tail * 1000, 1),
        "landing_tail_ms_per_task": round(tail * 1000 / n, 2),
    }


async def compare(client, repo: Path, n: int, seconds: float, concurrency: int, worktree: bool,
                  repeat: int) -> dict:
    """taskfleet and the bare SDK on the same tasks, alternating which goes first."""
    ideal = math.ceil(n / concurrency) * seconds
    # With worktrees the baseline does the same task the bare-SDK way (worktree, processes, commit,
    # a push per task); a second baseline that only adds and removes a worktree is shown beside it.
    activity = "worktree_commit_push" if worktree else "two_processes"
    extra = "worktree_two_processes" if worktree else ""
    ours: list[dict] = []
    baseline: list[float] = []
    worktree_only: list[float] = []
    cpu: dict[str, list[dict]] = {"taskfleet": [], activity: [], extra: []}
    for rep in range(repeat):
        for side in (("taskfleet", "baseline") if rep % 2 == 0 else ("baseline", "taskfleet")):
            before = cpu_seconds()
            if side == "taskfleet":
                ours.append(
                    await run_case(client, repo, n, seconds, concurrency, worktree=worktree))
                cpu["taskfleet"].append(cpu_ms_per_task(before, cpu_seconds(), n))
                continue
            wall = await sdk_baseline.run_once(client, activity, n, seconds, concurrency, str(repo),
                                               BASELINE_QUEUE)
            baseline.append(round(ideal / wall, 3))
            cpu[activity].append(cpu_ms_per_task(before, cpu_seconds(), n))
            # untimed: each run meets a clone of the same size
            sdk_baseline.forget_branches(str(repo))
            if extra:
                before = cpu_seconds()
                wall = await sdk_baseline.run_once(client, extra, n, seconds, concurrency,
                                                   str(repo), BASELINE_QUEUE)
                worktree_only.append(round(ideal / wall, 3))
                cpu[extra].append(cpu_ms_per_task(before, cpu_seconds(), n))
    ours_eff = statistics.median(r["efficiency"] for r in ours)
    base_eff = statistics.median(baseline)
    figures = {
        "tasks": n, "task_seconds": seconds, "concurrency": concurrency, "worktrees": worktree,
        "baseline_activity": activity,
        "taskfleet_efficiency": ours_eff,
        "baseline_efficiency": base_eff,
        "ratio_taskfleet_over_baseline": round(ours_eff / base_eff, 3),
        "taskfleet_efficiency_runs": [r["efficiency"] for r in ours],
        "baseline_efficiency_runs": baseline,
        "taskfleet_failed": sum(r["failed"] for r in ours),
        "taskfleet_overhead_ms_per_task": statistics.median(
            r["overhead_ms_per_task"] for r in ours),
        "landing_overhead_ms_per_task": statistics.median(
            r["landing_overhead_ms_per_task"] for r in ours),
        "landing_tail_ms_per_task": statistics.median(r["landing_tail_ms_per_task"] for r in ours),
        # Where each side's CPU went, ms per task (median per place): the cores both sides share
        # bound the ratio once the tasks' own sleeping no longer hides it.
        "cpu_ms_per_task": {
            side: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
            for side, runs in cpu.items() if runs
        },
    }
    if extra:
        figures["worktree_only_baseline_efficiency"] = statistics.median(worktree_only)
        figures["ratio_taskfleet_over_worktree_only_baseline"] = round(
            ours_eff / statistics.median(worktree_only), 3)
    return figures


def git_work_floor(root: Path, n: int) -> dict:
    """What a with-worktrees task must do and a task without one does not, timed alone (one git
    process at a time, no run in flight): `git add -A` + `git commit` of one new file in its own
    worktree, and one push of the n task branches to a bare remote. No scheduling can make a
    with-worktrees run cheaper than this on this machine:
    the figures bound the with/without ratio."""
    fx = make_git_remote(root)
    branches = [f"floor/t{i}" for i in range(n)]
    trees = [root / f"wt{i}" for i in range(n)]
    for branch, tree in zip(branches, trees):
        subprocess.run(["git", "worktree", "add", "-q", "-b", branch, str(tree), "HEAD"],
                       cwd=fx.clone, check=True)
    commits = []
    for tree in trees:
        (tree / "done.txt").write_text(tree.name)
        started = time.perf_counter()
        subprocess.run(["git", "add", "-A"], cwd=tree, check=True)
        subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "commit", "-q", "--no-verify",
                        "-m", tree.name], cwd=tree, check=True)
        commits.append(time.perf_counter() - started)
    pushes = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run(["git", "push", "-q", "--force", "origin", *branches],
                       cwd=fx.clone, check=True)
        pushes.append(time.perf_counter() - started)
        subprocess.run(["git", "push", "-q", "origin", *[f":{b}" for b in branches]],
                       cwd=fx.clone, check=True)
    commit_ms, push_ms = 1000 * statistics.median(commits), 1000 * statistics.median(pushes)
    cpus = os.cpu_count() or 1
    return {
        "tasks": n,
        "add_commit_ms_per_task": round(commit_ms, 1),
        f"push_{n}_branches_ms": round(push_ms, 1),
        # n commits share the cores when the tasks end together, then one push: the least a run adds
        "least_added_ms": round(commit_ms * math.ceil(n / cpus) + push_ms, 1),
    }


def with_over_without(compared: dict, floor: dict) -> dict:
    """Efficiency with worktrees / without, for each case measured both ways; for the case of the
    floor's size, also the best ratio the git work alone allows: the without-worktrees wall plus
    `least_added_ms`, before any signal, activity or claim."""
    ratios = {}
    for key, figures in compared.items():
        plain = compared.get(key.removesuffix("_with_worktrees"))
        if not figures["worktrees"] or plain is None:
            continue
        ratios[key] = round(figures["taskfleet_efficiency"] / plain["taskfleet_efficiency"], 3)
        if figures["tasks"] == floor["tasks"]:
            ideal = math.ceil(figures["tasks"] / figures["concurrency"]) * figures["task_seconds"]
            wall = ideal / plain["taskfleet_efficiency"]
            ratios[f"{key}_best_possible"] = round(
                wall / (wall + floor["least_added_ms"] / 1000), 3)
    return ratios


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes, one run each: seconds")
    parser.add_argument("--repeat", type=int, default=3, help="runs per side per case (full mode)")
    args = parser.parse_args()
    if args.quick:
        cases = {"9x0.2s_c9": (9, 0.2, 9, False), "9x0.2s_c9_with_worktrees": (9, 0.2, 9, True)}
        repeat, noop = 1, (100, 50)
    else:
        cases = {
            "100x0.2s_c20": (100, 0.2, 20, False),
            "9x0.5s_c9": (9, 0.5, 9, False),
            "100x0.2s_c20_with_worktrees": (100, 0.2, 20, True),
            "9x0.5s_c9_with_worktrees": (9, 0.5, 9, True),
        }
        repeat, noop = args.repeat, (1000, 100)
    figures: dict = {"quick": args.quick, "cpus": os.cpu_count(),
                     "load_average_1m_before": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory() as tmp:
        fx = make_git_remote(Path(tmp) / "git")
        async with temporal_worker(
                TASK_QUEUE, Path(tmp) / "state", max_concurrent_activities=200,
                max_concurrent_activity_task_polls=int(os.environ.get("POLLS", "5"))) as client:
            async with sdk_baseline.baseline_worker(client, BASELINE_QUEUE):
                await run_case(client, fx.clone, 20, 0, 20)  # warm-up: server caches, imports
                await sdk_baseline.run_once(client, "two_processes", 20, 0, 20,
                                            task_queue=BASELINE_QUEUE)
                figures["compare"] = {key: await compare(client, fx.clone, *case, repeat=repeat)
                                      for key, case in cases.items()}
                n, c = noop
                figures[f"{n}_noop_c{c}"] = await run_case(client, fx.clone, n, 0, c)
                if not args.quick:
                    figures["2000_noop_c100_history_limit_2000"] = await run_case(
                        client, fx.clone, 2000, 0, 100, max_history_events=2000
                    )
        figures["git_work_floor"] = git_work_floor(Path(tmp) / "floor", 9)
        figures["ratio_with_over_without_worktrees"] = with_over_without(
            figures["compare"], figures["git_work_floor"])
    figures["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    emit(figures)


if __name__ == "__main__":
    run(main)
