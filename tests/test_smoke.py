"""The plugin registers taskfleet on a plain worker, and that worker runs a workflow end to end."""

import os
import uuid
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from taskfleet.plugin import TaskfleetPlugin
from tests.conftest import save_history
from tests.smoke_workflow import SmokeInput, SmokeResult, SmokeWorkflow, smoke_greet


@activity.defn(name="user_activity")
async def user_activity() -> str:
    return "mine"


@workflow.defn(name="UserWorkflow", sandboxed=False)
class UserWorkflow:
    """A user's own workflow, registered on the same worker as the plugin."""

    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_activity(
            "user_activity", start_to_close_timeout=timedelta(seconds=10)
        )


async def test_smoke_workflow_runs_on_plugin_worker(client: Client, make_worker, task_queue: str):
    async with make_worker(workflows=[SmokeWorkflow], activities=[smoke_greet]):
        handle = await client.start_workflow(
            SmokeWorkflow.run,
            SmokeInput(name="fleet"),
            id=f"smoke-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            result_type=SmokeResult,
        )
        result = await handle.result()
        save_history("smoke", (await handle.fetch_history()).to_json())
    assert result.greeting == "hello, fleet"
    assert result.worker_pid == os.getpid()


async def test_plugin_extends_user_worker_config(client: Client, task_queue: str, settings):
    """The user's own workflows and activities stay registered next to ours."""
    plugin = TaskfleetPlugin(settings)
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[UserWorkflow, SmokeWorkflow],
        activities=[user_activity, smoke_greet],
        plugins=[plugin],
    )
    async with worker:
        mine = await client.execute_workflow(
            "UserWorkflow", id=f"user-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )
        ours = await client.execute_workflow(
            SmokeWorkflow.run,
            SmokeInput(name="both"),
            id=f"smoke-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            result_type=SmokeResult,
        )
        # The worker-memory services are started by the plugin's run_context while the worker runs.
        assert plugin.services.started
    assert mine == "mine"
    assert ours.greeting == "hello, both"
    assert not plugin.services.started
