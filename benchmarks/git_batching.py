"""N commits on N branches landed (a) through the batcher and (b) one push each, side by side.

Both go through the same GitBatchWorkflow and push_batch activity; (b) uses max_batch_size 1.
Run on a local bare remote and on an ssh-style transport whose wrapper adds a fixed delay per
connection (standing in for network round trips). Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

from common import emit, temporal_worker

from taskfleet.git_client import GitBatcherClient
from taskfleet.models import GitBatchConfig, GitOp
from taskfleet.testing import git, make_git_remote


def fake_ssh(folder: Path, delay: float) -> Path:
    """A GIT_SSH_COMMAND that waits `delay` per connection, then runs git's command locally."""
    script = folder / "slow-ssh"
    script.write_text(f'#!/bin/sh\nsleep {delay}\nshift\nexec sh -c "$*"\n')
    script.chmod(0o755)
    return script


def prepare(root: Path, n: int, ssh: bool) -> tuple[object, list[GitOp]]:
    fx = make_git_remote(root)
    if ssh:
        git(fx.clone, "remote", "set-url", "origin", f"ssh://bench-host{fx.remote}")
    ops = []
    for i in range(n):
        branch = f"bench/{i}"
        wt = fx.worktree(branch)
        fx.change(wt, f"file{i}.txt", f"change {i}\n")
        ops.append(GitOp(op_type="commit", branch=branch, message=f"change {i}", worktree=str(wt), id=f"op-{i}"))
    return fx, ops


async def land(client, task_queue: str, fx, ops: list[GitOp], batch_size: int) -> dict:
    gb = GitBatcherClient(
        client,
        GitBatchConfig(repo=str(fx.clone), max_batch_size=batch_size, max_batch_age_seconds=3600),
        task_queue,
    )
    started = time.perf_counter()
    await gb.enqueue(ops[0])  # signal-with-start; the rest are sent at once, as parallel tasks would
    await asyncio.gather(*(gb.handle.signal("enqueue", op) for op in ops[1:]))
    deadline = time.monotonic() + 600
    while True:
        status = await gb.status()
        if status.stats.landed_ops + status.stats.failed_ops >= len(ops):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {status.stats.landed_ops} of {len(ops)} landed")
        await asyncio.sleep(0.05)
    wall = time.perf_counter() - started
    landed = sum(1 for op in ops if fx.remote_ref(op.branch))
    return {
        "pushes_counted_by_hook": fx.pushes(),
        "wall_seconds": round(wall, 3),
        "landed": landed,
        "failed_ops": status.stats.failed_ops,
        "push_activity_seconds": round(status.stats.total_execute_seconds, 3),
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=50)
    parser.add_argument("--max-batch-size", type=int, default=10)
    parser.add_argument("--delay", type=float, default=0.1, help="seconds added per ssh connection")
    parser.add_argument("--repeat", type=int, default=3, help="runs per mode; medians are compared")
    args = parser.parse_args()
    figures: dict = {"ops": args.ops, "max_batch_size": args.max_batch_size}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["GIT_SSH_COMMAND"] = str(fake_ssh(root, args.delay))
        os.environ["GIT_SSH_VARIANT"] = "simple"
        async with temporal_worker("bench-git", root / "state") as client:
            for transport in ("local", "ssh_delay"):
                runs: dict = {"batched": [], "single": []}
                for rep in range(args.repeat):  # alternate the modes so drift hits both alike
                    for mode, size in (("batched", args.max_batch_size), ("single", 1)):
                        fx, ops = prepare(root / f"{transport}-{mode}-{rep}", args.ops, ssh=transport != "local")
                        runs[mode].append(await land(client, "bench-git", fx, ops, size))
                walls = {m: statistics.median(r["wall_seconds"] for r in runs[m]) for m in ("batched", "single")}
                runs["median_wall_seconds"] = walls
                runs["wall_ratio_batched_over_single"] = round(walls["batched"] / walls["single"], 3)
                runs["expected_batched_pushes"] = math.ceil(args.ops / args.max_batch_size)
                if transport == "ssh_delay":
                    runs["delay_per_connection_seconds"] = args.delay
                figures[transport] = runs
    emit(figures)


if __name__ == "__main__":
    asyncio.run(main())
