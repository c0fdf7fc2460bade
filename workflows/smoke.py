"""A one-activity workflow that proves a worker, its server and the plugin are wired up."""

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from taskfleet.models import SmokeInput, SmokeResult


@workflow.defn
class SmokeWorkflow:
    @workflow.run
    async def run(self, params: SmokeInput) -> SmokeResult:
        workflow.logger.info("smoke run for %s", params.name)
        return await workflow.execute_activity(
            "smoke_greet",
            params,
            result_type=SmokeResult,
            start_to_close_timeout=timedelta(seconds=30),
            summary=f"greet {params.name}",
        )
