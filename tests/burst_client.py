"""One client of the burst test, as its own process: sends `count` push ops at once through
GitBatcherClient (which coalesces what it holds into few signals) and exits once all are sent.

    python tests/burst_client.py <address> <task queue> <clone> <first index> <count>
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.client import Client  # noqa: E402

from taskfleet.clients.git_batcher import GitBatcherClient  # noqa: E402
from taskfleet.core.models.git_batch import GitBatchConfig, GitOp  # noqa: E402


async def main() -> None:
    address, queue, repo, first, count = (sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]),
                                          int(sys.argv[5]))
    client = await Client.connect(address)
    gb = GitBatcherClient(
        client, GitBatchConfig(repo=repo, max_batch_size=10, max_batch_age_seconds=2), queue)
    await asyncio.gather(*(gb.enqueue(GitOp(op_type="push", branch=f"s/{i}", id=f"burst-{i}"))
                           for i in range(first, first + count)))


if __name__ == "__main__":
    asyncio.run(main())
    # Skip interpreter finalization: the Temporal runtime's native threads may still be winding down
    # (as taskfleet-worker does; a finalizing interpreter they touch can crash).
    os._exit(0)
