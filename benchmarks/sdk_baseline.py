"""What the Temporal SDK and server give on this machine with no taskfleet code, for scale.

A bare workflow dispatches N activities with the same sliding window as the orchestrator, at
concurrency c, on the same dev server. Its activity either only sleeps d seconds
(`asyncio.sleep`) or starts the two processes a taskfleet task starts (`sh -c "sleep d"`, then
`sh -c true`). Same figures as `dispatch.py`: efficiency = ceil(N / c) * d / wall, or ms per
task for the no-op case. Prints JSON.
"""

from __future__ import annotations

import asyncio
import math
import time
from datetime import timedelta

from common import emit
from temporalio import activity, workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from taskfleet.devserver.server import find_temporal_cli

TASK_QUEUE = "bench-sdk-baseline"


@activity.defn
async def sleep_only(seconds: float) -> None:
    if seconds:
        await asyncio.sleep(seconds)


@activity.defn
async def two_processes(seconds: float) -> None:
    for command in (f"sleep {seconds}" if seconds else "true", "true"):
        proc = await asyncio.create_subprocess_exec("sh", "-c", command)
        await proc.wait()


@workflow.defn(sandboxed=False)
class BaselineDispatch:
    @workflow.run
    async def run(self, activity_name: str, n: int, seconds: float, concurrency: int) -> None:
        running = 0

        async def one() -> None:
            nonlocal running
            await workflow.execute_activity(activity_name, seconds, start_to_close_timeout=timedelta(minutes=5))
            running -= 1

        tasks = []
        for _ in range(n):
            await workflow.wait_condition(lambda: running < concurrency)
            running += 1
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)


async def measure(client, activity_name: str, n: int, seconds: float, concurrency: int, runs: int = 3) -> list[float]:
    figures = []
    for run in range(runs):
        started = time.perf_counter()
        await client.execute_workflow(
            BaselineDispatch.run, args=[activity_name, n, seconds, concurrency],
            id=f"baseline-{activity_name}-{n}-{run}-{time.time_ns()}", task_queue=TASK_QUEUE,
        )
        wall = time.perf_counter() - started
        ideal = math.ceil(n / concurrency) * seconds
        figures.append(round(ideal / wall, 3) if ideal else round(wall * 1000 / n, 2))
    return figures


async def main() -> None:
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=find_temporal_cli(), dev_server_log_level="error")
    try:
        async with Worker(env.client, task_queue=TASK_QUEUE, workflows=[BaselineDispatch],
                          activities=[sleep_only, two_processes], max_concurrent_activities=200):
            await measure(env.client, "sleep_only", 20, 0, 20, runs=1)  # warm-up
            figures = {}
            for name in ("sleep_only", "two_processes"):
                figures[name] = {
                    "9x0.5s_c9_efficiency": await measure(env.client, name, 9, 0.5, 9),
                    "100x0.2s_c20_efficiency": await measure(env.client, name, 100, 0.2, 20),
                    "1000_noop_c100_ms_per_task": await measure(env.client, name, 1000, 0, 100),
                }
    finally:
        await env.shutdown()
    emit(figures)


if __name__ == "__main__":
    asyncio.run(main())
