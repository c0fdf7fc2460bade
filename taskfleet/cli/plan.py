"""`taskfleet plan "GOAL" --repo PATH`: Claude writes a board for a goal; `--run` starts it at once.
The plan is a `PlannerWorkflow` on a worker of the task queue, with that worker's
`ANTHROPIC_API_KEY`; `--offline` runs it on a worker inside this command against the bundled
offline stand-in (canned answers, no model)."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from temporalio.client import Client, WorkflowFailureError

from taskfleet.cli.common import client_for, examples
from taskfleet.clients.planner import start_plan
from taskfleet.clients.preflight import check_clone
from taskfleet.core.models.plan import PlanInput, PlanResult
from taskfleet.core.plan_input import InvalidPlanInput, parse_plan_input


@dataclass
class Planning:
    client: Client
    task_queue: str
    offline: bool


@asynccontextmanager
async def _offline(args: argparse.Namespace) -> AsyncIterator[Planning]:
    """A worker in this process, on a private task queue, whose Claude is the offline stand-in."""
    from temporalio.worker import Worker

    from taskfleet.clients.connection import load_connect_config
    from taskfleet.core.settings import TaskfleetSettings
    from taskfleet.devserver.session import dev_server_session
    from taskfleet.plugin import TaskfleetPlugin
    from taskfleet.testing.standin import StandIn

    state_dir = Path(tempfile.mkdtemp(prefix="taskfleet-plan-"))
    task_queue = f"taskfleet-plan-offline-{uuid.uuid4().hex[:8]}"
    try:
        config = load_connect_config(args.address or "localhost:7233", args.namespace)
        with StandIn(batch_polls=1).serving():
            async with dev_server_session(config, state_dir) as session:
                worker = Worker(session.client, task_queue=task_queue, plugins=[TaskfleetPlugin(
                    TaskfleetSettings(state_dir=state_dir / "worker"))])
                async with worker:
                    yield Planning(client=session.client, task_queue=task_queue, offline=True)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


@asynccontextmanager
async def _online(args: argparse.Namespace) -> AsyncIterator[Planning]:
    yield Planning(client=await client_for(args), task_queue=args.task_queue, offline=False)


def _figures(result: PlanResult) -> str:
    u = result.usage
    answers = "1 answer" if result.attempts == 1 else f"{result.attempts} answers (one fix round)"
    return (f"{len(result.task_ids)} task(s) "
            f"({', '.join(result.task_ids[:10])}{', ...' if len(result.task_ids) > 10 else ''}) "
            f"from {answers}; Claude: {u.requests} request(s) in "
            f"{u.direct_calls + len(u.batch_ids)} API call(s), tokens in {u.input_tokens} (cache "
            f"read {u.cache_read_tokens}) out {u.output_tokens}, est. ${u.cost_usd:.4f}")


async def plan(args: argparse.Namespace) -> int:
    repo, base = check_clone(args.repo, args.base, args.remote)
    try:
        request = parse_plan_input(PlanInput(
            goal=args.goal, repo=repo, base=base, remote=args.remote, context=args.context or [],
            max_tasks=args.max_tasks, model=args.model or "", llm_batch=args.batch,
        ))
    except InvalidPlanInput as err:
        print(f"taskfleet: plan refused: {err}", file=sys.stderr)
        return 2
    offline = args.offline
    if offline:
        print("taskfleet: --offline, so this plan uses the bundled OFFLINE STAND-IN on a "
              "worker inside this command: no model is called and its board is canned",
              file=sys.stderr, flush=True)
    async with (_offline(args) if offline else _online(args)) as planning:
        code = await _plan_and_run(args, request, planning)
    return code


async def _plan_and_run(args: argparse.Namespace, request: PlanInput, planning: Planning) -> int:
    from taskfleet.cli.run import _notice_without_worker, run_board

    handle = await start_plan(planning.client, request, planning.task_queue, args.id)
    print(f"planning as {handle.id} on {request.repo} ({request.base})",
          file=sys.stderr, flush=True)
    notice = None
    if not planning.offline:
        notice = asyncio.ensure_future(
            _notice_without_worker(planning.client, handle, planning.task_queue))
    try:
        result = await handle.result()
    except WorkflowFailureError as err:
        # The cause's own message: its str() repeats its type.
        reason = getattr(err.cause, "message", None) or str(err.cause or err)
        print(f"taskfleet: {handle.id}: {reason}", file=sys.stderr)
        return 1
    finally:
        if notice is not None:
            notice.cancel()
    path = Path(args.output) if args.output else None
    if path is not None:
        path.write_text(result.board_toml)
    if args.json and not args.run:
        print(json.dumps({"workflow_id": handle.id, "path": str(path or ""), **asdict(result)},
                         indent=2), flush=True)
    elif path is None and not args.run:
        print(result.board_toml, end="", flush=True)
    print(f"planned board {result.name}: {_figures(result)}"
          + (f"; written to {path}" if path else ""), file=sys.stderr, flush=True)
    if not args.run:
        return 0
    temporary = None
    if path is None:
        temporary = tempfile.TemporaryDirectory(prefix="taskfleet-plan-board-")
        path = Path(temporary.name) / f"{result.name}.toml"
        path.write_text(result.board_toml)
    try:
        run_args = argparse.Namespace(board=str(path), repo=request.repo, remote=request.remote,
                                      max_parallel=None, run=None, verify=None, base=None,
                                      land=None, implementer=None, model=None, id=None,
                                      json=args.json, no_check=False, address=args.address,
                                      namespace=args.namespace, task_queue=planning.task_queue)
        return await run_board(run_args)
    finally:
        if temporary is not None:
            temporary.cleanup()


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan", help="Claude writes a board (TOML) for a goal; --run starts it",
        **examples("taskfleet plan 'move every module off the deprecated client' --repo /srv/clone "
                   "-o board.toml",
                   "taskfleet plan 'add type hints to utils' --repo /srv/clone "
                   "--context 'src/utils/*.py' --max-tasks 5 --run",
                   "taskfleet plan 'document the CLI' --repo /srv/clone --offline"))
    p.add_argument("goal", help="what the board should achieve, in words")
    p.add_argument("--repo", required=True, help="the clone to plan for (path on the worker)")
    p.add_argument("--context", action="extend", nargs="+", metavar="GLOB",
                   help="repo-relative globs of files the planner reads")
    p.add_argument("--max-tasks", type=int, default=20,
                   help="a board with more tasks is refused, never cut")
    p.add_argument("-o", "--output", metavar="BOARD.toml",
                   help="write the board here (default: stdout)")
    p.add_argument("--run", action="store_true",
                   help="start the board at once (as `taskfleet run` would)")
    p.add_argument("--base", default=None,
                   help="the branch the tasks start from (default: the remote's default branch)")
    p.add_argument("--remote", default="origin",
                   help="the remote the board's tasks land on (default origin)")
    p.add_argument("--model", help="Claude model id (default: the worker's TASKFLEET_MODEL)")
    p.add_argument("--batch", action="store_true",
                   help="send the request in a Message Batch (half price, slower)")
    p.add_argument("--offline", action="store_true",
                   help="plan on a worker inside this command with the bundled offline stand-in "
                        "(no model is called; the board is canned)")
    p.add_argument("--id", help="workflow id (default taskfleet-plan-<goal>-<random>)")
    p.add_argument("--json", action="store_true",
                   help="print the plan as JSON (with --run: the run's result, as `run --json`)")
    p.set_defaults(func=plan)
