"""Sandboxed twins of the workflows that run unsandboxed for speed, for tests/test_replay.py.

Same name, same code: replaying a history with a twin runs that code inside the sandbox, which
refuses wall-clock time, randomness, I/O and restricted imports in workflow code.
"""

from __future__ import annotations

from temporalio import workflow

# Imported inside the sandbox (not passed through), so the workflow module's own names are the
# sandbox's restricted ones.
from taskfleet.workflows.orchestrator import OrchestratorWorkflow

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.models.orchestrator import OrchestratorInput, OrchestratorResult


@workflow.defn(name="OrchestratorWorkflow", sandboxed=True)
class SandboxedOrchestratorWorkflow(OrchestratorWorkflow):
    @workflow.run
    async def run(self, params: OrchestratorInput) -> OrchestratorResult:
        return await super().run(params)


TWINS = [SandboxedOrchestratorWorkflow]
