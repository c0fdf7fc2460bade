"""Sends a batch of git ops to a GitBatchWorkflow from its own process, as parallel tasks would.

The benchmark's worker runs in the benchmark's process; sending 50 signals from that same event
loop would slow the worker it measures. Reads one JSON line (address, namespace, task queue,
config, ops), connects, says `ready`, waits for `go`, sends (signal-with-start, then the rest at
once), says `sent`, and exits when its input closes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.client import Client  # noqa: E402

from taskfleet.clients.git_batcher import GitBatcherClient  # noqa: E402
from taskfleet.core.models.git_batch import GitBatchConfig  # noqa: E402


async def main() -> None:
    job = json.loads(sys.stdin.readline())
    client = await Client.connect(job["address"], namespace=job["namespace"])
    gb = GitBatcherClient(client, GitBatchConfig(**job["config"]), job["task_queue"])
    ops = job["ops"]
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await gb.enqueue(ops[0])
    await asyncio.gather(*(gb.handle.signal("enqueue", op) for op in ops[1:]))
    print("sent", flush=True)
    # Stay until told to go: a process winding down would take CPU from the run being measured.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    os._exit(0)


if __name__ == "__main__":
    asyncio.run(main())
