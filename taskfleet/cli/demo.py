"""`taskfleet demo` (`make demo`): the main job on the embedded dev server. Runs the example board
(nine real changes, each checked by a real test) on a sample repository and bare remote under
`.taskfleet/demo/`, prints speed-up, pushes and the Web UI URL, and in a terminal keeps the
server up until Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import importlib.resources
import os
import shutil
import signal
import sys
import sysconfig
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from taskfleet.cli.common import examples
from taskfleet.cli.run import summary_table, watch
from taskfleet.clients.connection import load_connect_config
from taskfleet.clients.git_batcher import GitBatcherClient, git_batch_workflow_id
from taskfleet.clients.orchestrator import start_board
from taskfleet.clients.search_attributes import ensure_search_attributes
from taskfleet.core.boards import BoardError, load_board
from taskfleet.core.ids import orchestrator_workflow_id
from taskfleet.core.models.git_batch import GitBatchConfig
from taskfleet.core.settings import TaskfleetSettings
from taskfleet.devserver.server import find_temporal_cli
from taskfleet.devserver.session import dev_server_session
from taskfleet.sample_remote import make_sample_remote

# The example boards and the demo's seed repository ship as package data.
EXAMPLES = Path(str(importlib.resources.files("taskfleet.examples")))
DEMO_TASK_QUEUE = "taskfleet-demo"


def prepare_demo_repo(folder: Path) -> Path:
    """A fresh clone of a fresh bare remote, seeded from examples/demo-repo; returns the clone."""
    shutil.rmtree(folder, ignore_errors=True)
    return make_sample_remote(folder, seed_from=EXAMPLES / "demo-repo",
                              message="calc: an empty calculator").clone


def _ctrl_c() -> asyncio.Event:
    """Set on Ctrl-C (or SIGTERM); taken before the prompt is printed, so no Ctrl-C comes early."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


def _shown(path: str) -> str:
    """A path as short as it can be while still running verbatim from the current folder."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def _script(name: str) -> str:
    """A console script of this environment (`.venv/bin/<name>`): works without activating it."""
    path = Path(sysconfig.get_path("scripts")) / name
    return _shown(str(path)) if path.exists() else name


def _demo_batcher_id(clone: Path) -> str:
    return git_batch_workflow_id(str(clone), "origin", task_queue=DEMO_TASK_QUEUE)


async def _end_idle_batcher(client: Client, clone: Path) -> None:
    """End the demo's batcher when nothing is queued or failed, saying why, rather than leave it
    Running under "No workers polling" (its history and stats stay browsable)."""
    batcher = GitBatcherClient(client, GitBatchConfig(repo=str(clone)), DEMO_TASK_QUEUE)
    batcher.workflow_id = _demo_batcher_id(clone)
    try:
        status = await batcher.status()
        if status.queue or status.pending_batches or status.failed_batches or status.executing:
            print(f"batcher:  {batcher.workflow_id} still has work; it stays running (serve it "
                  f"with `taskfleet-worker --task-queue {DEMO_TASK_QUEUE}`)")
            return
        await batcher.handle.terminate(reason="taskfleet demo finished: nothing left to push")
    except RPCError as err:
        print(f"batcher:  {batcher.workflow_id}: {err.message}", file=sys.stderr)


async def demo(args: argparse.Namespace) -> int:
    if not getattr(args, "llm", False):
        args.board = args.board or str(EXAMPLES / "demo-board.toml")
        return await _demo(args)
    from taskfleet.cli.demo_llm import llm_backend

    args.board = args.board or str(EXAMPLES / "llm-board.toml")
    with llm_backend(EXAMPLES / "llm-board.answers.toml") as notice:
        print(notice, flush=True)
        return await _demo(args)


async def _demo(args: argparse.Namespace) -> int:
    config = load_connect_config(args.address, args.namespace)  # TEMPORAL_ADDRESS or a profile
    state_dir = Path(args.state_dir).resolve()
    try:
        board = load_board(args.board)
    except BoardError as err:
        print(f"taskfleet: board refused: {err}", file=sys.stderr)
        return 2
    clone = prepare_demo_repo(state_dir / "demo")
    # Imported here: the plugin brings the activities and the `anthropic` SDK (over a second of
    # imports), which every other command does without.
    from taskfleet.plugin import TaskfleetPlugin

    async with dev_server_session(config, state_dir) as session:
        worker = Worker(
            session.client,
            task_queue=DEMO_TASK_QUEUE,
            plugins=[TaskfleetPlugin(TaskfleetSettings(state_dir=state_dir))],
            max_concurrent_activities=32,
        )
        async with worker:
            notice = await ensure_search_attributes(session.client)  # a server of the user's
            if notice:
                print(f"taskfleet: {notice}", file=sys.stderr)
            handle = await start_board(
                session.client, board, str(clone), task_queue=DEMO_TASK_QUEUE,
                workflow_id=orchestrator_workflow_id(board.name, uuid.uuid4().hex[:8]),
                git_max_batch_size=10,
            )
            print(
                f"running board {board.name} ({len(board.tasks)} tasks) as {handle.id} on {clone}",
                flush=True)
            result = await watch(handle, len(board.tasks), show=sys.stderr.isatty())
            print(summary_table(result))
            pushes = len((state_dir / "demo" / "pushes.log").read_text().splitlines())
            landed = sum(t.landed for t in result.tasks)
            print()
            print(f"speed-up: {result.stats.speedup:.2f}x ({result.stats.task_seconds:.1f}s of "
                  f"task time in {result.stats.wall_seconds:.1f}s)")
            print(f"pushes:   {pushes} for {landed} landed tasks (the remote's hook counted them)")
            await _end_idle_batcher(session.client, clone)
            keep_up = sys.stdin.isatty() and not args.no_wait
            stops = session.started_here and not keep_up
            print(
                f"Web UI:   {session.ui_url}/namespaces/{config['namespace']}/workflows/{handle.id}"
                + (" (once the server is back, see below)" if stops else ""))
            flags = f"--address {config['target_host']}"
            bring_back = (f"`{_script('taskfleet-worker')} --dev {flags} --state-dir "
                          f"{_shown(str(state_dir))} --task-queue {DEMO_TASK_QUEUE}`")
            if not stops:
                print(f"CLI:      {_shown(find_temporal_cli())} workflow list {flags}")
                print(f"          {_script('taskfleet')} {flags} status {handle.id}")
            else:
                # The server we started stops with us: point at how to bring it (and the run) back.
                print("Server:   stopped with the demo; the run's history is kept in "
                      f"{state_dir / 'temporal.db'}.")
                print(f"          {bring_back} brings it back, "
                      f"then `{_script('taskfleet')} {flags} status {handle.id}`")
            if keep_up:
                stop = _ctrl_c()
                if session.started_here:
                    print(f"After Ctrl-C, {bring_back} brings the server back with a worker on "
                          "the demo's task queue.")
                print("The server stays up so you can browse the run; Ctrl-C to stop.", flush=True)
                await stop.wait()
    ok = all(t.status == "succeeded" and t.landed for t in result.tasks)
    return 0 if ok else 1


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="run the example board on the embedded dev server",
        **examples("taskfleet demo", "taskfleet demo --llm --no-wait",
                   "taskfleet --address localhost:7233 demo --state-dir /tmp/tf-demo"))
    p.add_argument("--board",
                   help="default: examples/demo-board.toml (--llm: examples/llm-board.toml)")
    p.add_argument("--llm", action="store_true",
                   help="the Claude board: the real API if ANTHROPIC_API_KEY is set, else the "
                        "bundled offline stand-in")
    p.add_argument("--state-dir", default=".taskfleet", help="dev server database, demo repo, logs")
    p.add_argument("--no-wait", action="store_true",
                   help="exit after the summary even in a terminal")
    p.set_defaults(func=demo)
