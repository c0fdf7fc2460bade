"""N commits on N branches landed (a) through the batcher and (b) one push each, side by side.

Both go through the same GitBatchWorkflow and push_batch activity; (b) uses max_batch_size 1.
Run on a local bare remote and on an ssh-style transport whose wrapper adds a fixed delay per
connection (standing in for network round trips). Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from common import emit, run, temporal_worker

from taskfleet.clients.git_batcher import GitBatcherClient, op_payload
from taskfleet.core.models.git_batch import GitBatchConfig, GitOp
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
    return fx, fx.commit_ops("bench", n)


async def _until_all_reported(gb: GitBatcherClient, fx, ops: list[GitOp], timeout: float = 600):
    """Wait until the workflow reports every op, without the wait slowing what it measures.

    The worker runs in this process. The batcher lands ops in the order it accepted them, so the
    last op's ref file appearing on the remote (one stat call) says the end is near; only then, or
    now and then in case some op failed, is the small `stats` query sent. (Polling the full
    `status` every 50 ms, as this did before, decoded every recent batch each time on the
    worker's event loop and added up to 50 ms of polling delay: a tenth of a batched run.)
    """
    last_ref = fx.remote / "refs" / "heads" / ops[-1].branch
    deadline = time.monotonic() + timeout
    last_query = time.monotonic()
    while True:
        if last_ref.exists() or time.monotonic() - last_query > 0.25:
            stats = await gb.stats()
            last_query = time.monotonic()
            if stats.landed_ops + stats.failed_ops >= len(ops):
                return stats
        if time.monotonic() > deadline:
            raise TimeoutError(f"not every one of {len(ops)} ops was reported within {timeout:g}s")
        await asyncio.sleep(0.002)


async def land(client, task_queue: str, fx, ops: list[GitOp], batch_size: int) -> dict:
    config = GitBatchConfig(repo=str(fx.clone), max_batch_size=batch_size,
                            max_batch_age_seconds=3600)
    gb = GitBatcherClient(client, config, task_queue)
    sender = await asyncio.create_subprocess_exec(
        sys.executable, str(Path(__file__).with_name("send_ops.py")),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )
    job = {
        "address": client.service_client.config.target_host, "namespace": client.namespace,
        "task_queue": task_queue, "config": asdict(config), "ops": [op_payload(op) for op in ops],
    }
    sender.stdin.write((json.dumps(job) + "\n").encode())
    await sender.stdin.drain()
    if await sender.stdout.readline() != b"ready\n":
        raise RuntimeError("the op sender did not start")
    os.sync()  # the set-up's writes (50 worktrees) must not be flushed during the measured run
    started = time.perf_counter()
    sender.stdin.write(b"go\n")
    await sender.stdin.drain()
    stats = await _until_all_reported(gb, fx, ops)
    wall = time.perf_counter() - started
    sender.stdin.close()
    await sender.wait()
    landed = sum(1 for op in ops if fx.remote_ref(op.branch))
    return {
        "pushes_counted_by_hook": fx.pushes(),
        "wall_seconds": round(wall, 3),
        "landed": landed,
        "failed_ops": stats.failed_ops,
        "push_activity_seconds": round(stats.total_execute_seconds, 3),
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=50)
    parser.add_argument("--max-batch-size", type=int, default=10)
    parser.add_argument("--delay", type=float, default=0.1, help="seconds added per ssh connection")
    parser.add_argument("--repeat", type=int, default=5, help="runs per mode; medians are compared")
    parser.add_argument("--transport", choices=["local", "ssh_delay"], action="append",
                        help="measure only this transport (repeatable; default: both)")
    parser.add_argument("--quick", action="store_true",
                        help="10 ops in batches of 5, once, local only: seconds")
    args = parser.parse_args()
    if args.quick:
        args.ops, args.max_batch_size, args.repeat, args.transport = (
            10, 5, 1, args.transport or ["local"])
    figures: dict = {"quick": args.quick, "ops": args.ops, "max_batch_size": args.max_batch_size}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["GIT_SSH_COMMAND"] = str(fake_ssh(root, args.delay))
        os.environ["GIT_SSH_VARIANT"] = "simple"
        async with temporal_worker("bench-git", root / "state") as client:
            # Unmeasured: the first landing pays one-time costs (imports, the server's caches).
            for size in (args.max_batch_size, 1):
                await land(client, "bench-git",
                           *prepare(root / f"warm-up-{size}", args.max_batch_size, ssh=False), size)
            for transport in args.transport or ("local", "ssh_delay"):
                runs: dict = {"batched": [], "single": []}
                for rep in range(args.repeat):  # alternate the modes so drift hits both alike
                    for mode, size in (("batched", args.max_batch_size), ("single", 1)):
                        fx, ops = prepare(root / f"{transport}-{mode}-{rep}", args.ops,
                                          ssh=transport != "local")
                        runs[mode].append(await land(client, "bench-git", fx, ops, size))
                walls = {m: statistics.median(r["wall_seconds"] for r in runs[m])
                         for m in ("batched", "single")}
                runs["median_wall_seconds"] = walls
                runs["wall_ratio_batched_over_single"] = round(
                    walls["batched"] / walls["single"], 3)
                runs["expected_batched_pushes"] = math.ceil(args.ops / args.max_batch_size)
                if transport == "ssh_delay":
                    runs["delay_per_connection_seconds"] = args.delay
                figures[transport] = runs
    emit(figures)


if __name__ == "__main__":
    run(main)
