"""Worker Versioning on unversioned workers: the behaviors our workflows declare must not break them.

Each taskfleet workflow declares its versioning behavior in its `@workflow.defn` (PINNED or
AUTO_UPGRADE, reasons beside each). The SDK (1.35) sends that behavior with every workflow task
completion, versioned worker or not, and the server refuses it from a worker without deployment
options ("versioning behavior cannot be specified without deployment options being set with
versioned mode"): the task fails and is retried forever. So on a worker that does not use Worker
Versioning, the plugin wraps the workflow runners in `UnversionedRunner`, which clears the field
from each completion; a versioned worker sends it untouched.
"""

from __future__ import annotations

from typing import Any

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.worker import WorkerConfig, WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner

UNSPECIFIED = 0  # temporal.api.enums.v1.VersioningBehavior.VERSIONING_BEHAVIOR_UNSPECIFIED


def uses_worker_versioning(config: WorkerConfig) -> bool:
    deployment = config.get("deployment_config")
    return bool(config.get("use_worker_versioning")) or bool(deployment and deployment.use_worker_versioning)


class _UnversionedInstance(WorkflowInstance):
    def __init__(self, inner: WorkflowInstance) -> None:
        self._inner = inner

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        completion = self._inner.activate(act)
        if completion.HasField("successful"):
            completion.successful.versioning_behavior = UNSPECIFIED
        return completion

    def get_serialization_context(self, command_info: Any) -> Any:
        return self._inner.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        return self._inner.get_external_store_context(command_info)

    def get_info(self) -> Any:
        return self._inner.get_info()

    def get_thread_id(self) -> int | None:
        return self._inner.get_thread_id()


class UnversionedRunner(WorkflowRunner):
    """The given runner, with each completion's versioning behavior cleared."""

    def __init__(self, inner: WorkflowRunner) -> None:
        self.inner = inner

    def prepare_workflow(self, defn: Any) -> None:
        self.inner.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _UnversionedInstance(self.inner.create_instance(det))

    def set_worker_level_failure_exception_types(self, types: Any) -> None:
        self.inner.set_worker_level_failure_exception_types(types)
