"""The rules every task process is started under: its environment and its process tree. Set once per
worker (the plugin, from `TaskfleetSettings`) in a context variable, so workers sharing a process
keep their own; outside a worker the process environment's rules apply."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from taskfleet.activities.processes.process_trees import MODE_AUTO, SETTING, ProcessTrees, detect
from taskfleet.core.task_env import ALLOW_VARIABLE, TaskEnvironment


@dataclass(frozen=True)
class ExecutorPolicy:
    environment: TaskEnvironment
    trees: ProcessTrees


_CURRENT: ContextVar[ExecutorPolicy | None] = ContextVar("taskfleet_executor_policy", default=None)


def current_policy() -> ExecutorPolicy:
    policy = _CURRENT.get()
    if policy is None:
        policy = ExecutorPolicy(TaskEnvironment.from_environ(),
                                detect(os.environ.get(SETTING) or MODE_AUTO))
    return policy


@contextmanager
def using_policy(policy: ExecutorPolicy) -> Iterator[ExecutorPolicy]:
    token = _CURRENT.set(policy)
    try:
        yield policy
    finally:
        _CURRENT.reset(token)


def task_env_problem(names: list[str]) -> str:
    """Why a task may not have these worker variables here ("" when it may): not allowed by
    TASKFLEET_TASK_ENV, or missing here. Names only, never a value."""
    if not names:
        return ""
    environment = current_policy().environment
    refused = environment.refused(names)
    if refused:
        allowed = ", ".join(environment.allow) or "nothing"
        return (f"env {', '.join(refused)}: not allowed by this worker's {ALLOW_VARIABLE} "
                f"({allowed}); the worker's operator decides which variables tasks may see")
    missing = environment.missing(names)
    if missing:
        return f"env {', '.join(missing)}: allowed, but not set in the worker's environment"
    return ""
