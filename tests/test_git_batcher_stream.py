"""A sustained stream of ops through continue-as-new, on a server with scaled-down history limits.

Continue-as-new must not wait for a moment with no flush due, which a stream never gives: history
would pass the hard limit and the server would terminate the batcher with accepted ops queued. This
test starts its own dev server whose limits are a few hundred events, so the batcher must
continue as new many times while three clients keep sending, and loses nothing.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from taskfleet.clients.git_batcher import GitBatcherClient
from taskfleet.core.models.git_batch import GitBatchConfig, GitOp
from taskfleet.devserver.server import find_temporal_cli
from taskfleet.plugin import TaskfleetPlugin
from tests.conftest import GitRemoteFixture, eventually, git

# streams ops through continue-as-new on a server of its own
pytestmark = [pytest.mark.slow, pytest.mark.heavy(seconds=12)]

# 600 ops in batches of 10: about four runs of the batcher at this suggestion (the burst test sends
# 1,500 from five processes).
CLIENTS = 3
OPS_PER_CLIENT = 200
SUGGEST_AT = 250  # events: the server suggests continue-as-new past this
HARD_LIMIT = 1500  # events: the server terminates the workflow past this


def make_branches(fx: GitRemoteFixture, prefix: str, count: int) -> dict[str, str]:
    """`count` branches in the clone, each one new commit on main, made by one `git fast-import`."""
    base = git(fx.clone, "rev-parse", "main")
    chunks = []
    for i in range(count):
        content = f"{prefix} {i}\n"
        message = f"{prefix} {i}"
        chunks.append(
            f"commit refs/heads/{prefix}/{i}\ncommitter t <t@t.invalid> 1700000000 +0000\n"
            f"data {len(message)}\n{message}\nfrom {base}\n"
            f"M 644 inline {prefix}-{i}.txt\ndata {len(content)}\n{content}\n"
        )
    subprocess.run(["git", "fast-import", "--quiet"], cwd=fx.clone, input="".join(chunks),
                   text=True, check=True)
    out = git(fx.clone, "for-each-ref", "--format=%(refname:short) %(objectname)",
              f"refs/heads/{prefix}/")
    return dict(line.split(" ") for line in out.splitlines())


async def test_stream_through_continue_as_new_loses_nothing(git_remote: GitRemoteFixture, settings,
                                                            tmp_path: Path):
    fx = git_remote
    updates = tmp_path / "ref-updates.log"
    # Every ref the remote accepts, one line per update: an op landed twice would show twice.
    fx.install_hook("pre-receive", f'cat >> "{updates}"\necho push >> "{fx.push_log}"\n')
    branches = make_branches(fx, "s", CLIENTS * OPS_PER_CLIENT)
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=find_temporal_cli(),
        dev_server_log_level="error",
        dev_server_extra_args=[
            "--dynamic-config-value", f"limit.historyCount.suggestContinueAsNew={SUGGEST_AT}",
            "--dynamic-config-value", f"limit.historyCount.warn={HARD_LIMIT // 2}",
            "--dynamic-config-value", f"limit.historyCount.error={HARD_LIMIT}",
        ],
    )
    config = GitBatchConfig(repo=str(fx.clone), max_batch_size=10, max_batch_age_seconds=2)
    try:
        task_queue = "stream"
        async with Worker(env.client, task_queue=task_queue, plugins=[TaskfleetPlugin(settings)]):

            async def send(n: int) -> None:
                # Each sender has its own connection, as separate processes would.
                own = await Client.connect(env.client.service_client.config.target_host)
                gb = GitBatcherClient(own, config, task_queue)
                for i in range(n * OPS_PER_CLIENT, (n + 1) * OPS_PER_CLIENT):
                    await gb.enqueue(GitOp(op_type="push", branch=f"s/{i}", id=f"stream-{i}"))

            await asyncio.gather(*(send(n) for n in range(CLIENTS)))
            gb = GitBatcherClient(env.client, config, task_queue)
            total = CLIENTS * OPS_PER_CLIENT

            async def all_landed():
                stats = await gb.stats()
                assert stats.landed_ops + stats.failed_ops >= total, stats
                return await gb.status()

            status = await eventually(all_landed, timeout=150, interval=0.5)
            runs = [w async for w in env.client.list_workflows(f'WorkflowId = "{gb.workflow_id}"')]
    finally:
        await env.shutdown()

    assert status.stats.total_ops == total
    assert status.stats.failed_ops == 0 and status.stats.landed_ops == total
    assert status.queue == [] and status.pending_batches == [] and status.failed_batches == []
    assert status.runs >= 3, (f"only {status.runs} run(s): the test did not push the batcher "
                              "through continue-as-new")
    statuses = sorted(str(r.status) for r in runs)
    assert all(r.status in (WorkflowExecutionStatus.CONTINUED_AS_NEW,
                            WorkflowExecutionStatus.RUNNING) for r in runs), statuses
    assert len(runs) == status.runs
    remote = dict(line.split(" ") for line in git(fx.remote, "for-each-ref",
                                                  "--format=%(refname:short) %(objectname)",
                                                  "refs/heads/s/").splitlines())
    assert remote == branches, (
        f"{len(set(branches) - set(remote))} branch(es) missing on the remote")
    updated = [line.split()[2] for line in updates.read_text().splitlines() if line.strip()]
    assert len(updated) == total and len(set(updated)) == total, "a ref was updated more than once"
