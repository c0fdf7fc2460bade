"""The docs' plugin snippet (docs/deployment.md), pasted into a user's module beside
their own sandboxed workflow (`from taskfleet import TaskfleetPlugin` at the top),
validates and runs both."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from temporalio.client import Client

from taskfleet.core.models.lessons import LessonsAnswer
from taskfleet.core.names import LESSONS_QUERY_WORKFLOW
from tests.conftest import ROOT, eventually

USER_CODE = textwrap.dedent('''
    from datetime import timedelta

    from temporalio import activity, workflow


    @activity.defn
    async def my_activity(name: str) -> str:
        return f"hello {name}"


    @workflow.defn  # sandboxed, as by default
    class MyWorkflow:
        @workflow.run
        async def run(self, name: str) -> str:
            return await workflow.execute_activity(my_activity, name, start_to_close_timeout=timedelta(seconds=30))


''')  # noqa: E501 (a user's module, as they would write it)


def docs_plugin_snippet() -> str:
    """The python block that uses `TaskfleetPlugin`: one in the README and the docs
    pages together."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    blocks = [
        b for page in pages for b in re.findall(r"```python\n(.*?)```", page.read_text(), re.S)]
    snippets = [b for b in blocks if "TaskfleetPlugin()" in b]
    assert len(snippets) == 1, (
        "the docs should have exactly one plugin snippet (docs/deployment.md)")
    return snippets[0]


def user_module(address: str, task_queue: str) -> str:
    """The snippet with the user's definitions pasted in before `main`,
    pointed at the test's server."""
    snippet = docs_plugin_snippet()
    assert "await" not in snippet.split("async def main")[0], "no top-level await in the snippet"
    head, main = snippet.split("async def main", 1)
    code = head + USER_CODE + "async def main" + main
    return code.replace('"localhost:7233"', f'"{address}"').replace(
        'task_queue="taskfleet"', f'task_queue="{task_queue}"')


async def test_readme_snippet_in_a_user_module_runs_the_users_workflow_and_ours(
    client: Client, server_address: str, task_queue: str, tmp_path: Path
):
    user_dir = tmp_path / "my-project"
    user_dir.mkdir()
    (user_dir / "my_app.py").write_text(user_module(server_address, task_queue))
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "my_app.py"], cwd=user_dir, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        async def polling() -> None:
            assert proc.poll() is None, log.read_text()
            from taskfleet.clients.pollers import workflow_pollers

            assert await workflow_pollers(client, task_queue)

        await eventually(polling, timeout=60)
        mine = await client.execute_workflow("MyWorkflow", "user", id=f"mine-{task_queue}",
                                             task_queue=task_queue, result_type=str)
        assert mine == "hello user"
        ours = await client.execute_workflow(LESSONS_QUERY_WORKFLOW, None, id=f"ours-{task_queue}",
                                             task_queue=task_queue, result_type=LessonsAnswer)
        assert ours.stats.lessons == 0
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            await asyncio.to_thread(proc.wait, 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    output = log.read_text()
    assert ("Failed validating workflow" not in output
            and "RestrictedWorkflowAccessError" not in output), output
