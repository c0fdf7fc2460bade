"""Bounded history under a burst: 1,500 ops from five client processes at once, against a server
that suggests continue-as-new at 300 events and terminates a run at 3,000. Every run of the batcher
stays within twice the suggestion, and every op lands exactly once."""

from __future__ import annotations

import asyncio
import sys

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from taskfleet.clients.git_batcher import GitBatcherClient
from taskfleet.core.models.git_batch import GitBatchConfig
from taskfleet.devserver.server import find_temporal_cli
from taskfleet.plugin import TaskfleetPlugin
from tests.conftest import ROOT, GitRemoteFixture, eventually, git
from tests.test_git_batcher_stream import make_branches

# a burst from five clients on a server of its own
pytestmark = [pytest.mark.slow, pytest.mark.heavy(seconds=27)]

CLIENTS = 5
OPS_PER_CLIENT = 300
SUGGEST_AT = 300
HARD_LIMIT = 3000


async def test_a_burst_from_five_clients_keeps_every_run_within_twice_the_suggestion(
    git_remote: GitRemoteFixture, settings, tmp_path
):
    fx = git_remote
    updates = tmp_path / "ref-updates.log"
    fx.install_hook("pre-receive", f'cat >> "{updates}"\necho push >> "{fx.push_log}"\n')
    branches = make_branches(fx, "s", CLIENTS * OPS_PER_CLIENT)
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=find_temporal_cli(),
        dev_server_log_level="error",
        dev_server_extra_args=[
            "--dynamic-config-value", f"limit.historyCount.suggestContinueAsNew={SUGGEST_AT}",
            "--dynamic-config-value", f"limit.historyCount.error={HARD_LIMIT}",
        ],
    )
    address = env.client.service_client.config.target_host
    total = CLIENTS * OPS_PER_CLIENT
    try:
        async with Worker(env.client, task_queue="burst", plugins=[TaskfleetPlugin(settings)]):
            clients = [
                await asyncio.create_subprocess_exec(
                    sys.executable, str(ROOT / "tests" / "burst_client.py"), address, "burst",
                    str(fx.clone), str(n * OPS_PER_CLIENT), str(OPS_PER_CLIENT))
                for n in range(CLIENTS)
            ]
            assert [await c.wait() for c in clients] == [0] * CLIENTS
            gb = GitBatcherClient(env.client, GitBatchConfig(repo=str(fx.clone)), "burst")

            async def all_landed():
                stats = await gb.stats()
                assert stats.landed_ops + stats.failed_ops >= total, stats
                return await gb.status()

            status = await eventually(all_landed, timeout=170, interval=0.5)
            runs = [w async for w in env.client.list_workflows(f'WorkflowId = "{gb.workflow_id}"')]
            lengths = [len((await env.client.get_workflow_handle(r.id, run_id=r.run_id)
                            .fetch_history()).events) for r in runs]
    finally:
        await env.shutdown()

    assert (status.stats.total_ops == total and status.stats.landed_ops == total
            and status.stats.failed_ops == 0)
    assert status.stats.rejected_ops == 0
    assert status.runs >= 2, (f"only {status.runs} run(s): the burst did not push the batcher "
                              "through continue-as-new")
    assert all(r.status in (WorkflowExecutionStatus.CONTINUED_AS_NEW,
                            WorkflowExecutionStatus.RUNNING) for r in runs)
    print(f"burst: {len(runs)} runs, peak history {max(lengths)} events (suggestion {SUGGEST_AT})")
    assert max(lengths) <= 2 * SUGGEST_AT, sorted(lengths)
    remote = dict(line.split(" ") for line in git(fx.remote, "for-each-ref",
                                                  "--format=%(refname:short) %(objectname)",
                                                  "refs/heads/s/").splitlines())
    assert remote == branches
    updated = [line.split()[2] for line in updates.read_text().splitlines() if line.strip()]
    assert len(updated) == total and len(set(updated)) == total, "a ref was updated more than once"
