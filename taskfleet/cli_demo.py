"""`taskfleet demo`: the main job on the embedded dev server, then (in a terminal) keep it up to browse."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import uuid
from pathlib import Path

from temporalio.worker import Worker

from taskfleet.connection import load_connect_config
from taskfleet.embedded import dev_server_session
from taskfleet.models import SmokeInput, SmokeResult
from taskfleet.plugin import TaskfleetPlugin
from taskfleet.settings import TaskfleetSettings


async def _wait_for_ctrl_c() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def demo(args: argparse.Namespace) -> int:
    config = load_connect_config(args.address or "localhost:7233", args.namespace)
    state_dir = Path(args.state_dir)
    async with dev_server_session(config, state_dir) as session:
        worker = Worker(
            session.client,
            task_queue=args.task_queue,
            plugins=[TaskfleetPlugin(TaskfleetSettings(state_dir=state_dir))],
        )
        async with worker:
            workflow_id = f"taskfleet-smoke-{uuid.uuid4().hex[:8]}"
            result = await session.client.execute_workflow(
                "SmokeWorkflow",
                SmokeInput(name="demo"),
                id=workflow_id,
                task_queue=args.task_queue,
                result_type=SmokeResult,
            )
            print(f"{workflow_id}: {result.greeting}")
            print(f"Web UI: {session.ui_url}/namespaces/{config['namespace']}/workflows/{workflow_id}")
            print(f"CLI:    temporal workflow list --address {config['target_host']}")
            if sys.stdin.isatty() and not args.no_wait:
                print("The server stays up so you can browse the run; Ctrl-C to stop.", flush=True)
                await _wait_for_ctrl_c()
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the main job on the embedded dev server")
    p.add_argument("--state-dir", default=".taskfleet", help="dev server database and demo files")
    p.add_argument("--no-wait", action="store_true", help="exit after the summary even in a terminal")
    p.set_defaults(func=demo)
