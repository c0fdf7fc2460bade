"""Every recorded history in tests/histories replays against today's workflow code.

A change that breaks determinism for running workflows fails here. Record new histories with
`make histories` (tests that call `save_history` write them) when a workflow changes on purpose.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from taskfleet.plugin import TaskfleetPlugin
from tests.conftest import HISTORIES

EXPECTED = {
    "smoke",
    "git_batcher_ten_ops",
    "git_batcher_after_continue_as_new",
    "orchestrator_nine_tasks",
    "orchestrator_continue_as_new",
}


def load_histories() -> list[WorkflowHistory]:
    histories = []
    for path in sorted(HISTORIES.glob("*.json")):
        data = json.loads(path.read_text())
        histories.append(WorkflowHistory.from_json(path.stem, data))
    return histories


async def test_recorded_histories_replay(settings):
    names = {path.stem for path in HISTORIES.glob("*.json")}
    assert EXPECTED <= names, f"missing recorded histories: {EXPECTED - names}"
    replayer = Replayer(workflows=[], plugins=[TaskfleetPlugin(settings)])
    histories = load_histories()

    async def each() -> AsyncIterator[WorkflowHistory]:
        for history in histories:
            yield history

    # The iterator form: with a plugin, Replayer.replay_workflows in SDK 1.35 fails on a plain list.
    replayed, failures = [], {}
    async with replayer.workflow_replay_iterator(each()) as results:
        async for result in results:
            replayed.append(result.history.workflow_id)
            if result.replay_failure:
                failures[result.history.workflow_id] = str(result.replay_failure)
    assert not failures, failures
    assert sorted(replayed) == sorted(h.workflow_id for h in histories)
