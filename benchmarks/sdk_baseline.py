"""What the Temporal SDK and server give on this machine with no taskfleet code, for scale.

A bare workflow dispatches N activities with the same sliding window as the orchestrator, at
concurrency c, on the same dev server. Its activity either only sleeps d seconds
(`asyncio.sleep`), or starts the two processes a taskfleet task starts (`sh -c "sleep d"`, then
`sh -c true`), or does that inside a git worktree it adds and removes (`git worktree add --detach`,
`git worktree remove --force`), or does the whole of a taskfleet task with a worktree the bare-SDK
way (`worktree_commit_push`: worktree on its own branch, the two processes, a commit, one `git
push` of the branch per task, worktree removed): the fair baseline for taskfleet tasks with
worktrees, which also commit and land each task (through the batcher). Same figures as
`dispatch.py`: efficiency = ceil(N / c) * d / wall, or ms per task for the no-op case. `dispatch.py`
imports this module to run the baseline beside taskfleet in one run. Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import subprocess
import time
import uuid
from datetime import timedelta
from pathlib import Path

from common import emit, run
from temporalio import activity, workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from taskfleet.devserver.server import find_temporal_cli

TASK_QUEUE = "bench-sdk-baseline"


@activity.defn
async def sleep_only(seconds: float, repo: str = "") -> None:
    if seconds:
        await asyncio.sleep(seconds)


async def _two_processes(seconds: float, cwd: str | None = None) -> None:
    for command in (f"sleep {seconds}" if seconds else "true", "true"):
        proc = await asyncio.create_subprocess_exec("sh", "-c", command, cwd=cwd)
        await proc.wait()


async def _git(repo: str, *args: str, tries: int = 20) -> None:
    """Concurrent `git worktree add/remove` in one clone trip on each other's half-written or
    half-removed entries (`failed to read .git/worktrees/<x>/commondir`, `Invalid path
    '.git/worktrees/<x>'`) or lock files: retried, as any user would."""
    for attempt in range(tries):
        proc = await asyncio.create_subprocess_exec("git", "-C", repo, *args,
                                                    stdout=asyncio.subprocess.DEVNULL,
                                                    stderr=asyncio.subprocess.PIPE)
        _, err = await proc.communicate()
        if not proc.returncode:
            return
        message = err.decode(errors="replace").strip()
        if attempt + 1 == tries or not any(m in message for m in (
                "failed to read", "Invalid path", ".lock", "already registered")):
            raise RuntimeError(f"git {' '.join(args)}: {message}")
        await asyncio.sleep(0.01 * (attempt + 1))


@activity.defn
async def two_processes(seconds: float, repo: str = "") -> None:
    await _two_processes(seconds)


@activity.defn
async def worktree_two_processes(seconds: float, repo: str) -> None:
    path = str(Path(repo).parent / "baseline-worktrees" / uuid.uuid4().hex[:12])
    await _git(repo, "worktree", "add", "--detach", "--quiet", path, "HEAD")
    try:
        await _two_processes(seconds, cwd=path)
    finally:
        await _git(repo, "worktree", "remove", "--force", path)


@activity.defn
async def worktree_commit_push(seconds: float, repo: str) -> None:
    """The same task as a taskfleet task with a worktree, written with the bare SDK: a worktree on
    a branch of its own, the two processes (the second writes a file), a commit, a push of the
    branch (one per task: the bare SDK has no batcher), then the worktree removed."""
    name = uuid.uuid4().hex[:12]
    path = str(Path(repo).parent / "baseline-worktrees" / name)
    await _git(repo, "worktree", "add", "--quiet", "-B", f"baseline/{name}", path, "HEAD")
    try:
        await _two_processes(seconds, cwd=path)
        Path(path, "done.txt").write_text(name + "\n")
        await _git(path, "add", "-A")
        await _git(path, "commit", "-q", "-m", f"baseline {name}")
        await _git(path, "push", "-q", "--force", "origin", f"baseline/{name}")
    finally:
        await _git(repo, "worktree", "remove", "--force", path)


def forget_branches(repo: str) -> None:
    """Delete the `baseline/*` branches `worktree_commit_push` left, in the clone and on its remote
    (untimed, after a run): every run of either side then meets a repository of the same size,
    instead of one that grows by a branch per baseline task (a push's ref advertisement and the
    remote's connectivity check grow with the refs)."""
    names = subprocess.run(
        ["git", "for-each-ref", "--format=%(refname:short)", "refs/heads/baseline/"], cwd=repo,
        check=True, capture_output=True, text=True).stdout.split()
    if not names:
        return
    subprocess.run(["git", "push", "-q", "origin", *[f":refs/heads/{name}" for name in names]],
                   cwd=repo, check=True)
    subprocess.run(["git", "branch", "-q", "-D", *names], cwd=repo, check=True)


ACTIVITIES = [sleep_only, two_processes, worktree_two_processes, worktree_commit_push]


@workflow.defn(sandboxed=False)
class BaselineDispatch:
    @workflow.run
    async def run(self, activity_name: str, n: int, seconds: float, concurrency: int,
                  repo: str = "") -> None:
        running = 0

        async def one() -> None:
            nonlocal running
            await workflow.execute_activity(
                activity_name, args=[seconds, repo], start_to_close_timeout=timedelta(minutes=5)
            )
            running -= 1

        tasks = []
        for _ in range(n):
            await workflow.wait_condition(lambda: running < concurrency)
            running += 1
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)


def baseline_worker(client, task_queue: str = TASK_QUEUE) -> Worker:
    return Worker(client, task_queue=task_queue, workflows=[BaselineDispatch],
                  activities=ACTIVITIES, max_concurrent_activities=200)


async def run_once(client, activity_name: str, n: int, seconds: float, concurrency: int,
                   repo: str = "", task_queue: str = TASK_QUEUE) -> float:
    """Wall seconds of one baseline dispatch."""
    started = time.perf_counter()
    await client.execute_workflow(
        BaselineDispatch.run, args=[activity_name, n, seconds, concurrency, repo],
        id=f"baseline-{activity_name}-{n}-{time.time_ns()}", task_queue=task_queue,
    )
    return time.perf_counter() - started


async def measure(client, activity_name: str, n: int, seconds: float, concurrency: int,
                  runs: int = 3) -> list[float]:
    figures = []
    for _ in range(runs):
        wall = await run_once(client, activity_name, n, seconds, concurrency)
        ideal = math.ceil(n / concurrency) * seconds
        figures.append(round(ideal / wall, 3) if ideal else round(wall * 1000 / n, 2))
    return figures


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes, one run each: seconds")
    args = parser.parse_args()
    runs = 1 if args.quick else 3
    cases = (
        {"9x0.2s_c9_efficiency": (9, 0.2, 9), "20x0.1s_c10_efficiency": (20, 0.1, 10),
         "100_noop_c50_ms_per_task": (100, 0, 50)}
        if args.quick else
        {"9x0.5s_c9_efficiency": (9, 0.5, 9), "100x0.2s_c20_efficiency": (100, 0.2, 20),
         "1000_noop_c100_ms_per_task": (1000, 0, 100)}
    )
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=find_temporal_cli(),
                                                dev_server_log_level="error")
    try:
        async with baseline_worker(env.client):
            await measure(env.client, "sleep_only", 20, 0, 20, runs=1)  # warm-up
            figures: dict = {"quick": args.quick}
            for name in ("sleep_only", "two_processes"):
                figures[name] = {key: await measure(env.client, name, *case, runs=runs)
                                 for key, case in cases.items()}
    finally:
        await env.shutdown()
    emit(figures)


if __name__ == "__main__":
    run(main)
