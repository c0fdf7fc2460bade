"""The taskfleet worker: `taskfleet-worker` / `python worker.py` (any cluster) or with `--dev`.
Connection settings come from Temporal's environment configuration (`TEMPORAL_*` variables and
config profiles), so one worker runs unchanged against a self-hosted cluster or Temporal Cloud."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path

from temporalio.common import WorkerDeploymentVersion
from temporalio.worker import Worker, WorkerDeploymentConfig

import taskfleet
from taskfleet.clients.connection import (
    StartupError,
    connect,
    describe,
    load_connect_config,
    make_runtime,
)
from taskfleet.core.names import DEFAULT_TASK_QUEUE
from taskfleet.core.settings import TaskfleetSettings
from taskfleet.core.task_env import TaskEnvError
from taskfleet.devserver.session import dev_server_session
from taskfleet.plugin import TaskfleetPlugin


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise StartupError(f"{name}={value!r} is not a whole number") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run the taskfleet Temporal worker.")
    parser.add_argument("--version", action="version",
                        version=f"taskfleet-worker {taskfleet.__version__}")
    parser.add_argument("--dev", action="store_true",
                        help="use the server at the address, or start the embedded dev server "
                             "there (SQLite in the state dir, Web UI on --ui-port)")
    parser.add_argument("--address", help="host:port (default: TEMPORAL_ADDRESS or localhost:7233)")
    parser.add_argument("--namespace", help="namespace (default: TEMPORAL_NAMESPACE or default)")
    parser.add_argument("--task-queue",
                        default=os.environ.get("TASKFLEET_TASK_QUEUE", DEFAULT_TASK_QUEUE),
                        help="task queue to poll (env TASKFLEET_TASK_QUEUE; default %(default)s)")
    parser.add_argument("--max-concurrent-activities", type=int, default=None,
                        help="activity slots (env TASKFLEET_MAX_CONCURRENT_ACTIVITIES; "
                             "default 100)")
    parser.add_argument("--metrics-address", default=os.environ.get("TASKFLEET_METRICS_ADDRESS"),
                        help="serve Prometheus metrics on host:port "
                             "(env TASKFLEET_METRICS_ADDRESS)")
    parser.add_argument("--ui-port", type=int, default=None,
                        help="dev server Web UI port (default: port + 1000)")
    parser.add_argument("--state-dir", default=os.environ.get("TASKFLEET_STATE_DIR", ".taskfleet"),
                        help="where the dev server database, logs and caches live "
                             "(env TASKFLEET_STATE_DIR)")
    parser.add_argument("--deployment-name",
                        default=os.environ.get("TASKFLEET_DEPLOYMENT_NAME") or None,
                        help="run as a version of this Worker Deployment (with --build-id; env "
                             "TASKFLEET_DEPLOYMENT_NAME)")
    parser.add_argument("--build-id", default=os.environ.get("TASKFLEET_BUILD_ID") or None,
                        help="this worker's version in the deployment (env TASKFLEET_BUILD_ID)")
    parser.add_argument("--task-env", default=os.environ.get("TASKFLEET_TASK_ENV", ""),
                        help="worker variables task processes may see beyond PATH, HOME, locale, "
                             "TZ and git identity: names or patterns, comma-separated (env "
                             "TASKFLEET_TASK_ENV; default none)")
    parser.add_argument("--process-trees", choices=("auto", "pid-namespace", "process-group"),
                        default=os.environ.get("TASKFLEET_PROCESS_TREES") or "auto",
                        help="how a task's processes die with it and with the worker: a PID "
                             "namespace per command where allowed (auto), required, or process "
                             "groups (env TASKFLEET_PROCESS_TREES)")
    parser.add_argument("--shutdown-grace-seconds", type=float,
                        default=float(os.environ.get("TASKFLEET_SHUTDOWN_GRACE_SECONDS", "10")),
                        help="how long in-flight activities may finish after Ctrl-C or SIGTERM")
    return parser.parse_args(argv)


def deployment_config(args: argparse.Namespace) -> WorkerDeploymentConfig | None:
    """Worker Versioning: with a deployment name and build id, this worker is that version (each
    workflow declares PINNED or AUTO_UPGRADE); without them, an unversioned worker."""
    name, build_id = args.deployment_name, args.build_id
    if not name and not build_id:
        return None
    if not name or not build_id:
        raise StartupError("--deployment-name and --build-id go together (env "
                           "TASKFLEET_DEPLOYMENT_NAME, TASKFLEET_BUILD_ID)")
    if "." in name:
        raise StartupError(f"deployment name {name!r} must not contain '.'")
    return WorkerDeploymentConfig(version=WorkerDeploymentVersion(name, build_id),
                                  use_worker_versioning=True)


async def run(args: argparse.Namespace) -> None:
    versioning = deployment_config(args)
    config = load_connect_config(args.address, args.namespace)
    max_activities = args.max_concurrent_activities or _env_int(
        "TASKFLEET_MAX_CONCURRENT_ACTIVITIES", 100)
    if max_activities < 1:
        raise StartupError("--max-concurrent-activities must be at least 1")
    runtime = make_runtime(args.metrics_address)
    state_dir = Path(args.state_dir)
    try:
        settings = TaskfleetSettings(state_dir=state_dir, task_env=args.task_env,
                                     process_trees=args.process_trees)
    except TaskEnvError as err:
        raise StartupError(str(err)) from None

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async with AsyncExitStack() as stack:
        if args.dev:
            session = await stack.enter_async_context(
                dev_server_session(config, state_dir, args.ui_port, runtime))
            client, ui = session.client, f" ui={session.ui_url}"
            origin = ("started the embedded dev server" if session.started_here
                      else "reusing the server")
        else:
            client = await connect(config, runtime)
            ui = ""  # a cluster's Web UI address is not something a worker can know
            origin = "connected"
        worker = Worker(client, task_queue=args.task_queue, plugins=[TaskfleetPlugin(settings)],
                        max_concurrent_activities=max_activities,
                        graceful_shutdown_timeout=timedelta(seconds=args.shutdown_grace_seconds),
                        deployment_config=versioning)
        metrics = f" metrics=http://{args.metrics_address}/metrics" if args.metrics_address else ""
        version = (f" deployment_version={versioning.version.to_canonical_string()}" if versioning
                   else "")
        print(f"taskfleet worker: {origin}, {describe(config)} task_queue={args.task_queue}"
              f"{ui}{metrics}{version} pid={os.getpid()}", flush=True)
        # A task, so that a failed start ends us with its message rather than await a Ctrl-C.
        running = asyncio.create_task(worker.run())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
        shutting_down = None
        if not running.done():
            print("taskfleet worker: shutting down", flush=True)
            # Not `await worker.shutdown()`: it waits on a completion the SDK signals only once
            # polling started, so a start failing after a SIGTERM would hang. Ask, then await `run`.
            shutting_down = asyncio.create_task(worker.shutdown())
            await asyncio.wait({running})
        stopping.cancel()
        try:
            await running
        except StartupError as err:
            if not stop.is_set():
                raise
            print(f"taskfleet worker: error while stopping: {err}", file=sys.stderr, flush=True)
        except Exception as err:
            if not stop.is_set():
                raise StartupError(f"the worker stopped: {err}") from None
            print(f"taskfleet worker: error while stopping: {err}", file=sys.stderr, flush=True)
        finally:
            if shutting_down is not None:
                shutting_down.cancel()
    print("taskfleet worker: stopped", flush=True)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=os.environ.get("TASKFLEET_LOG_LEVEL", "INFO"))
    try:
        args = parse_args(argv)
        asyncio.run(run(args))
    except StartupError as err:
        print(f"taskfleet worker: {err}", file=sys.stderr, flush=True)
        return 2
    return 0


def console_main() -> None:
    """Entry point of `taskfleet-worker` and `worker.py`; skips interpreter finalization: CPython
    aborts if the Temporal runtime's native threads, still winding down, touch it then."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    console_main()
