"""The smoke workflow's activity: answers from the worker process, so a caller sees which one ran it."""

import os

from temporalio import activity

from taskfleet.models import SmokeInput, SmokeResult


class SmokeActivities:
    @activity.defn(name="smoke_greet")
    async def greet(self, params: SmokeInput) -> SmokeResult:
        activity.logger.info("greeting %s", params.name)
        return SmokeResult(greeting=f"hello, {params.name}", worker_pid=os.getpid())
