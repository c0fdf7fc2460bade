"""The wheel holds one namespace, and drops into a user's project that has its own
`workflows.py` and `activities.py`, a `run_task` activity and a `SmokeWorkflow`.

One wheel build and one fresh venv per session (about 14 s, mostly pip).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from temporalio.client import Client

from taskfleet.clients.pollers import workflow_pollers
from tests.conftest import ROOT, GitRemoteFixture, eventually, free_port

# builds the wheel and installs it in a fresh venv
pytestmark = [pytest.mark.slow, pytest.mark.heavy(seconds=29)]


@pytest.fixture(scope="session")
def wheel_and_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the built wheel, the bin folder of a fresh venv it is installed in)."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for name in listed:  # the working tree as it is, without build/ or egg-info leftovers
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    pip = ["-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([sys.executable, *pip, "wheel", "--no-deps", "-w", str(base / "dist"), str(src)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = (base / "dist").glob("taskfleet-*.whl")
    # The venv gets no pip of its own (ensurepip is 4 s of CPU): this pip installs into it.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base / "venv")],
                   check=True, timeout=120)
    bin_dir = base / "venv" / "bin"
    subprocess.run([sys.executable, *pip, "--python", str(bin_dir / "python"), "install",
                    str(wheel)], check=True, capture_output=True, timeout=600)
    return wheel, bin_dir


def test_the_wheels_only_top_level_name_is_taskfleet(wheel_and_venv):
    wheel, _ = wheel_and_venv
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"taskfleet"}, top
    for data in ("taskfleet/examples/demo-board.toml",
                 "taskfleet/examples/demo-repo/tools/make_op.py",
                 "taskfleet/prompts/implementer.j2", "taskfleet/workflows/orchestrator/__init__.py",
                 "taskfleet/activities/task_runner.py"):
        assert data in names, data


def test_every_package_of_the_checkout_is_in_the_wheel(wheel_and_venv):
    """setuptools packs only the packages pyproject lists: a new sub-package left out of the list
    would import in a checkout and fail in an install."""
    wheel, _ = wheel_and_venv
    names = set(zipfile.ZipFile(wheel).namelist())
    # pyproject's package-dir
    installed_as = {"workflows": "taskfleet/workflows", "activities": "taskfleet/activities",
                    "examples": "taskfleet/examples", "taskfleet": "taskfleet"}
    for folder, target in installed_as.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            relative = init.relative_to(ROOT / folder).as_posix()
            assert f"{target}/{relative}" in names, relative


USER_WORKFLOWS = '''
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities import run_task


@workflow.defn(name="SmokeWorkflow")
class SmokeWorkflow:
    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(run_task, name,
                                               start_to_close_timeout=timedelta(seconds=30))
'''  # noqa: E501 (a user's module, as they would write it)

USER_ACTIVITIES = '''
from temporalio import activity


@activity.defn(name="run_task")
async def run_task(name: str) -> str:
    return f"user task {name}"
'''

USER_WORKER = '''
import asyncio
import sys

from temporalio.client import Client
from temporalio.worker import Worker

from activities import run_task
from taskfleet import TaskfleetPlugin
from workflows import SmokeWorkflow


async def main(address: str, task_queue: str) -> None:
    client = await Client.connect(address)
    worker = Worker(client, task_queue=task_queue, workflows=[SmokeWorkflow], activities=[run_task],
                    plugins=[TaskfleetPlugin()])
    await worker.run()


asyncio.run(main(sys.argv[1], sys.argv[2]))
'''


class UserWorker:
    """The user's own `worker.py` run with the wheel's venv from their project folder."""

    def __init__(self, bin_dir: Path, project: Path, address: str, task_queue: str,
                 log: Path) -> None:
        for name, text in (("workflows.py", USER_WORKFLOWS), ("activities.py", USER_ACTIVITIES),
                           ("worker.py", USER_WORKER)):
            (project / name).write_text(textwrap.dedent(text))
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(bin_dir / "python"), "worker.py", address, task_queue], cwd=project,
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env)

    async def wait_polling(self, client: Client, task_queue: str) -> None:
        async def polling() -> None:
            assert self.proc.poll() is None, self.log.read_text()
            assert await workflow_pollers(client, task_queue)

        await eventually(polling, timeout=90)

    async def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        try:
            await asyncio.to_thread(self.proc.wait, 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.log.read_text()


async def run_board_with(bin_dir: Path, env: dict[str, str], address: str, task_queue: str,
                         board: Path, repo: Path, cwd: Path) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(bin_dir / "taskfleet"), "--address", address, "--task-queue", task_queue, "run",
        str(board), "--repo", str(repo), "--json", cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    return proc.returncode, out.decode(), err.decode()


def write_board(project: Path, worktree: bool) -> Path:
    board = project / "board.toml"
    board.write_text(
        'name = "wheel"\nrun = "echo done > done.txt"\nverify = "test -f done.txt"\n'
        f'worktree = {str(worktree).lower()}\n[[tasks]]\nid = "W1"\n[[tasks]]\nid = "W2"\n')
    return board


async def test_a_user_project_with_its_own_workflows_activities_run_task_and_smoke_workflow(
    wheel_and_venv, client: Client, server_address: str, task_queue: str,
    git_remote: GitRemoteFixture, tmp_path: Path
):
    """Their `workflows`/`activities` modules import; their `run_task` and `SmokeWorkflow` register
    beside ours; `taskfleet run` (the installed script) runs a board on their worker with
    default settings."""
    _, bin_dir = wheel_and_venv
    project = tmp_path / "user-project"
    project.mkdir()
    worker = UserWorker(bin_dir, project, server_address, task_queue, tmp_path / "user-worker.log")
    try:
        await worker.wait_polling(client, task_queue)
        mine = await client.execute_workflow("SmokeWorkflow", "x", id=f"user-smoke-{task_queue}",
                                             task_queue=task_queue, result_type=str)
        assert mine == "user task x"
        code, out, err = await run_board_with(bin_dir, worker.env, server_address, task_queue,
                                              write_board(project, worktree=False),
                                              git_remote.clone, project)
        assert code == 0, err + worker.log.read_text()
        assert [(t["id"], t["status"]) for t in json.loads(out)["tasks"]] == [
            ("W1", "succeeded"), ("W2", "succeeded")]
    finally:
        log = await worker.stop()
    assert "More than one" not in log and "ModuleNotFoundError" not in log, log


async def test_a_board_lands_from_a_user_project_with_default_settings(
    wheel_and_venv, client: Client, server_address: str, task_queue: str,
    git_remote: GitRemoteFixture, tmp_path: Path
):
    _, bin_dir = wheel_and_venv
    project = tmp_path / "user-project"
    project.mkdir()
    worker = UserWorker(bin_dir, project, server_address, task_queue, tmp_path / "user-worker.log")
    try:
        await worker.wait_polling(client, task_queue)
        code, out, err = await run_board_with(bin_dir, worker.env, server_address,
                                              task_queue, write_board(project, worktree=True),
                                              git_remote.clone, project)
        assert code == 0, err
        result = json.loads(out)
        assert [(t["id"], t["landed"]) for t in result["tasks"]] == [("W1", True), ("W2", True)]
        assert git_remote.remote_ref("task/W2")
    finally:
        await worker.stop()


async def test_the_demo_from_the_wheel_finds_its_board_and_seed_repo(
        wheel_and_venv, tmp_path: Path):
    _, bin_dir = wheel_and_venv
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = await asyncio.create_subprocess_exec(
        str(bin_dir / "taskfleet"), "--address", f"127.0.0.1:{port}", "demo", "--no-wait",
        "--state-dir", "state",
        cwd=elsewhere, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    text = out.decode()
    assert proc.returncode == 0, text + err.decode()
    assert "pushes:   1 for 9 landed tasks" in text
    assert "site-packages/taskfleet/examples" not in err.decode()
    # It started its own server and stopped it: the closing hint says so instead of pointing at it.
    assert "Server:   stopped with the demo" in text and "temporal workflow list" not in text
    assert (elsewhere / "state" / "demo" / "clone" / "calc").is_dir()
