"""Every recorded history in tests/histories replays against today's workflow code.

A change that breaks determinism for running workflows fails here. Record new histories with
`make histories` (tests that call `save_history` write them) when a workflow changes on purpose.
"""

from __future__ import annotations

import ast
import json
from collections.abc import AsyncIterator
from pathlib import Path

from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from taskfleet.core import names
from taskfleet.plugin import WORKFLOWS, TaskfleetPlugin
from tests.conftest import HISTORIES
from tests.sandboxed_twins import TWINS
from tests.smoke_workflow import SmokeWorkflow

EXPECTED = {
    "smoke",
    "git_batcher_ten_ops",
    "git_batcher_after_continue_as_new",
    "orchestrator_nine_tasks",
    "orchestrator_continue_as_new",
    "lease_lock_fifo",
    "lease_lock_after_continue_as_new",
    "merge_queue_one_batch",
    "merge_queue_bisection",
    "merge_queue_after_continue_as_new",
    "orchestrator_queue_semantic",
    "lease_lock_above_the_fence",
    "orchestrator_env_checked",
    "orchestrator_env_refused",
    "git_batcher_enqueue_list",
    "git_batcher_replies_in_background",
    "git_batcher_replies_from_push",
    "git_batcher_flush_after",
    "orchestrator_last_tasks_land_together",
    # Claude tasks with their payloads in the store (local prepare, verdict and landing steps)
    "orchestrator_llm_three--0.2.0",
    "llm_batcher_three--0.2.0",
    "llm_task_batched--0.2.0",
    "llm_task_fix_round--0.2.0",
    "llm_task_judged_revise--0.2.0",
    "judge_workflow_revise--0.2.0",
    "orchestrator_judged--0.2.0",
    "orchestrator_judged_commands--0.2.0",
    "planner_fix_round--0.2.0",
    "merge_queue_speculating",
}


def load_histories() -> list[WorkflowHistory]:
    histories = []
    for path in sorted(HISTORIES.glob("*.json")):
        data = json.loads(path.read_text())
        # A recording kept beside an older one (`<name>--<version>`) ran under the id
        # `<name>`, which its children's ids derive from.
        histories.append(WorkflowHistory.from_json(path.stem.split("--")[0], data))
    return histories


async def replay(
        replayer: Replayer, histories: list[WorkflowHistory]) -> tuple[list[str], dict[str, str]]:
    """Replay every history; the workflow ids replayed, and the failures by workflow id."""

    async def each() -> AsyncIterator[WorkflowHistory]:
        for history in histories:
            yield history

    # The iterator form: Replayer.replay_workflows in SDK 1.35 fails on a plain list.
    replayed, failures = [], {}
    async with replayer.workflow_replay_iterator(each()) as results:
        async for result in results:
            replayed.append(result.history.workflow_id)
            if result.replay_failure:
                failures[result.history.workflow_id] = str(result.replay_failure)
    return replayed, failures


async def test_recorded_histories_replay(settings):
    names = {path.stem for path in HISTORIES.glob("*.json")}
    assert EXPECTED <= names, f"missing recorded histories: {EXPECTED - names}"
    histories = load_histories()
    replayed, failures = await replay(
        Replayer(workflows=[SmokeWorkflow], plugins=[TaskfleetPlugin(settings)]), histories)
    assert not failures, failures
    assert sorted(replayed) == sorted(h.workflow_id for h in histories)


async def test_unsandboxed_workflows_replay_inside_the_sandbox():
    """Workflows that run unsandboxed for speed must still pass the sandbox's checks (no
    wall-clock time, randomness, I/O or restricted imports): replay their histories inside it."""
    unsandboxed = {workflow._Definition.from_class(cls).name for cls in WORKFLOWS
                   if not workflow._Definition.from_class(cls).sandboxed}
    twins = {workflow._Definition.from_class(cls).name: cls for cls in TWINS}
    assert unsandboxed == set(twins), \
        "every unsandboxed workflow needs a twin in tests/sandboxed_twins.py"
    histories = [h for h in load_histories() if _workflow_type(h) in twins]
    assert histories, f"no recorded history of {sorted(twins)}"
    replayed, failures = await replay(Replayer(workflows=list(twins.values())), histories)
    assert not failures, failures
    assert sorted(replayed) == sorted(h.workflow_id for h in histories)


def _workflow_type(history: WorkflowHistory) -> str:
    return history.events[0].workflow_execution_started_event_attributes.workflow_type.name


def test_every_patch_is_asked_in_compat():
    """What workflows keep for older histories stays in workflows/compat.py, which says per patch
    which recorded histories need it and when it can go; every patch id is asked there, and no
    module of a workflow package asks one itself."""
    workflows = Path(__file__).resolve().parent.parent / "workflows"
    asked: dict[str, set[str]] = {}
    for path in sorted(workflows.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("patched", "deprecate_patch")):
                asked.setdefault(str(path.relative_to(workflows)), set()).update(
                    a.id for a in node.args if isinstance(a, ast.Name))
    assert set(asked) == {"compat.py"}, sorted(asked)
    patch_ids = {name for name in vars(names) if name.startswith("PATCH_")}
    assert asked["compat.py"] == patch_ids
