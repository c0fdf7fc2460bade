"""A one-activity workflow that proves a worker, its server and the plugin are wired up.

Test-only: it is registered beside the plugin by the tests (never by the plugin), as a user's own
workflow would be.
"""

import os
from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow


@dataclass
class SmokeInput:
    name: str = "taskfleet"


@dataclass
class SmokeResult:
    greeting: str
    worker_pid: int


@activity.defn(name="smoke_greet")
async def smoke_greet(params: SmokeInput) -> SmokeResult:
    """Answers from the worker process, so a caller sees which one ran it."""
    return SmokeResult(greeting=f"hello, {params.name}", worker_pid=os.getpid())


@workflow.defn(name="SmokeWorkflow")
class SmokeWorkflow:
    @workflow.run
    async def run(self, params: SmokeInput) -> SmokeResult:
        workflow.logger.info("smoke run for %s", params.name)
        return await workflow.execute_activity(
            smoke_greet,
            params,
            start_to_close_timeout=timedelta(seconds=30),
            summary=f"greet {params.name}",
        )
