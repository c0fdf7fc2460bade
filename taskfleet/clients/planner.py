"""Client side of the planner: start a `PlannerWorkflow`, get its board."""

from __future__ import annotations

import uuid
from dataclasses import asdict
from typing import Any

from temporalio.client import Client, WorkflowHandle

from taskfleet.core.ids import plan_workflow_id
from taskfleet.core.models.plan import PlanInput, PlanResult
from taskfleet.core.names import DEFAULT_TASK_QUEUE, PLANNER_WORKFLOW


async def start_plan(client: Client, plan: PlanInput, task_queue: str = DEFAULT_TASK_QUEUE,
                     workflow_id: str | None = None) -> WorkflowHandle[Any, PlanResult]:
    """The input goes as plain JSON, as a person would type it into `temporal workflow start`."""
    workflow_id = workflow_id or plan_workflow_id(plan.goal, uuid.uuid4().hex[:8])
    goal = " ".join(plan.goal.split())
    return await client.start_workflow(PLANNER_WORKFLOW, asdict(plan), id=workflow_id,
                                       task_queue=task_queue, result_type=PlanResult,
                                       static_summary=f"plan: {goal}"[:200])
