"""Worker Versioning on unversioned workers: our workflows declare a versioning behavior, which the
SDK sends with every completion and the server refuses from a worker without deployment options
(the task retried forever). On such a worker the plugin wraps the runners in `UnversionedRunner`,
which clears the field; a versioned worker sends it untouched."""

from __future__ import annotations

from typing import Any

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.worker import (
    WorkerConfig,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowRunner,
)

UNSPECIFIED = 0  # temporal.api.enums.v1.VersioningBehavior.VERSIONING_BEHAVIOR_UNSPECIFIED


def uses_worker_versioning(config: WorkerConfig) -> bool:
    deployment = config.get("deployment_config")
    return (bool(config.get("use_worker_versioning"))
            or bool(deployment and deployment.use_worker_versioning))


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
