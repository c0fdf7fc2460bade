"""The planner end to end: a goal in, a board `taskfleet run` accepts out. Real Temporal server,
real git, the real `anthropic` client talking HTTP to the bundled stand-in; the `taskfleet` and
`temporal` commands run as a person runs them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError

from taskfleet.clients.board_store import store_board_file
from taskfleet.clients.planner import start_plan
from taskfleet.core.boards import parse_toml_board
from taskfleet.core.models.plan import PlanInput, PlanResult, PlanStatus
from taskfleet.devserver.server import find_temporal_cli
from taskfleet.testing.standin import StandIn
from tests.conftest import GitRemoteFixture, eventually, git, save_history
from tests.llm_support import standin_env
from tests.user_cli import taskfleet

GOOD = {"name": "greetings", "tasks": [
    {"id": "G1", "scope": "add hello.txt", "run": "echo hello > hello.txt",
     "verify": "grep -q hello hello.txt"},
    {"id": "G2", "scope": "add bye.txt", "run": "echo bye > bye.txt",
     "verify": "grep -q bye bye.txt"},
]}
# Two tasks share an id, one has no command, one sets a key a task does not take.
BAD = {"name": "greetings", "tasks": [
    {"id": "G1", "scope": "add hello.txt", "run": "echo hello > hello.txt", "verify": "true"},
    {"id": "G1", "scope": "again", "run": "true", "verify": "true"},
    {"id": "G3", "scope": "no command", "verify": "true"},
]}


@pytest.fixture
def standin() -> Iterator[StandIn]:
    with standin_env() as server:
        yield server


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "user"
    folder.mkdir()
    return folder


def plan_input(fx: GitRemoteFixture, **overrides: object) -> PlanInput:
    goal = "greet the world in two files"
    return PlanInput(**{"goal": goal, "repo": str(fx.clone), **overrides})  # type: ignore[arg-type]


async def plan(client: Client, task_queue: str, request: PlanInput,
               workflow_id: str | None = None) -> PlanResult:
    return await (await start_plan(client, request, task_queue, workflow_id)).result()


def reason_of(failed: WorkflowFailureError) -> str:
    return getattr(failed.cause, "message", "") or str(failed)


def no_key_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}


@pytest.mark.smoke
async def test_the_planner_writes_a_board_taskfleet_run_accepts(
        client, make_worker, task_queue, git_remote, standin, user_dir, server_address):
    git_remote.change(git_remote.clone, "docs/guide.md", "# Guide\nsay hello\n")
    git(git_remote.clone, "add", "-A")
    git(git_remote.clone, "commit", "-qm", "guide")
    standin.plans = [{"board": GOOD}]
    board = user_dir / "board.toml"
    async with make_worker():
        # No key in the command's own environment: the worker's Claude (here the stand-in) is asked.
        done = await taskfleet(server_address, "plan", "greet the world in two files", "--repo",
                               str(git_remote.clone), "--context", "docs/*.md", "--max-tasks", "5",
                               "-o", str(board), cwd=user_dir, task_queue=task_queue,
                               env=no_key_env())
    assert done.returncode == 0, done.stderr
    assert ("planned board greetings: 2 task(s) (G1, G2) from 1 answer" in done.stderr
            and str(board) in done.stderr)
    parsed = parse_toml_board(board.read_text(), str(board))  # the parser `taskfleet run` uses
    assert [(t.id, t.run, t.verify) for t in parsed.tasks] == [
        (t["id"], t["run"], t["verify"]) for t in GOOD["tasks"]]
    assert parsed.name == "greetings" and parsed.base == "main"
    # what `run` stores
    assert store_board_file(board, str(git_remote.clone)).reference.open_tasks == 2
    (request,) = standin.requests_for("submit_board")
    params = request["params"]
    assert params["tool_choice"] == {"type": "tool", "name": "submit_board"}
    prompt = params["messages"][0]["content"][0]["text"]
    assert "Goal: greet the world in two files" in prompt and "at most 5 tasks" in prompt
    assert "- README.md" in prompt and "- shared.txt" in prompt  # the file list
    assert '<file path="docs/guide.md">\n# Guide\nsay hello\n' in prompt  # the context files


async def test_an_invalid_board_is_fixed_in_one_round_and_becomes_a_lesson(
        client, make_worker, task_queue, git_remote, standin, settings):
    standin.plans = [{"board": BAD}, {"board": GOOD}]
    async with make_worker():
        handle = await start_plan(client, plan_input(git_remote), task_queue, "planner_fix_round")
        result = await handle.result()
        status = await handle.query("status", result_type=PlanStatus)
        save_history("planner_fix_round", (await handle.fetch_history()).to_json())
    assert result.attempts == 2 and result.task_ids == ["G1", "G2"], result
    assert status.stage == "done" and status.usage.requests == 2
    assert (result.usage.requests == 2 and result.usage.direct_calls == 2
            and result.usage.cost_usd > 0)
    second = standin.requests_for("submit_board")[1]["params"]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    feedback = second[2]["content"][0]
    assert feedback["type"] == "tool_result" and feedback["is_error"] is True
    assert "tasks[1] (G1): duplicate task id G1 (and tasks[0] (G1))" in feedback["content"] or \
        "tasks[2] (G3): task G3 has no run command" in feedback["content"], feedback["content"]
    lessons = [json.loads(line) for line in Path(settings.lessons_path).read_text().splitlines()]
    assert [(x["activity_type"], x["failure_type"]) for x in lessons] == [("plan", "board_refused")]


async def test_a_board_refused_twice_fails_with_the_parsers_errors(
        client, make_worker, task_queue, git_remote, standin):
    standin.plans = [{"board": BAD}, {"no_tool": True}]
    async with make_worker():
        with pytest.raises(WorkflowFailureError) as failed:
            await plan(client, task_queue, plan_input(git_remote))
    reason = reason_of(failed.value)
    assert reason.startswith(
        "plan failed: the board was refused 2 times: the model did not call submit_board"), reason


async def test_more_tasks_than_allowed_are_refused_not_cut(client, make_worker, task_queue,
                                                           git_remote, standin):
    three = {"name": "three", "tasks": [
        {"id": f"T{i}", "scope": "s", "run": "true", "verify": "true"} for i in range(3)]}
    standin.plans = [{"board": three}, {"board": three}]
    async with make_worker():
        with pytest.raises(WorkflowFailureError) as failed:
            await plan(client, task_queue, plan_input(git_remote, max_tasks=2))
        assert "the board has 3 tasks; at most 2 are allowed" in reason_of(failed.value)
        standin.plans = [{"board": three}, {"board": {**three, "tasks": three["tasks"][:2]}}]
        result = await plan(client, task_queue, plan_input(git_remote, max_tasks=2))
    assert result.task_ids == ["T0", "T1"] and result.attempts == 2


async def test_plan_run_plans_offline_and_lands_the_board(server_address, git_remote, user_dir):
    """--offline: the command plans on its own worker with the offline stand-in, then runs it."""
    board = user_dir / "planned.toml"
    done = await taskfleet(server_address, "plan", "write the plan notes", "--repo",
                           str(git_remote.clone), "-o", str(board), "--run", "--offline",
                           cwd=user_dir, env=no_key_env(), timeout=180)
    assert done.returncode == 0, done.stderr
    assert ("OFFLINE STAND-IN" in done.stderr
            and "planned board offline-plan: 2 task(s) (P1, P2)" in done.stderr)
    assert "P1" in done.stdout and "P2" in done.stdout  # the run's table
    for task in ("P1", "P2"):
        commit = git_remote.remote_ref(f"task/{task}")
        assert commit and git(git_remote.remote, "show", f"{commit}:plan/{task}.md").startswith(
            f"{task}: write")
    assert parse_toml_board(board.read_text()).name == "offline-plan"


async def test_plan_prints_the_board_on_stdout_and_refuses_a_bad_clone_in_one_line(
        server_address, git_remote, user_dir, tmp_path):
    done = await taskfleet(server_address, "plan", "write the plan notes", "--repo",
                           str(git_remote.clone), "--max-tasks", "1", "--offline", cwd=user_dir,
                           env=no_key_env())
    assert done.returncode == 0, done.stderr
    assert (parse_toml_board(done.stdout).tasks[0].id == "P1"
            and len(parse_toml_board(done.stdout).tasks) == 1)
    refused = await taskfleet(server_address, "plan", "x", "--repo",
                              str(tmp_path / "nowhere"), cwd=user_dir)
    assert (refused.returncode == 2 and "no such folder" in refused.stderr
            and "Traceback" not in refused.stderr)


async def run_temporal(address: str, *args: str) -> tuple[int, str, str]:
    import asyncio

    proc = await asyncio.create_subprocess_exec(find_temporal_cli(), *args, "--address", address,
                                                stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_a_person_starts_a_plan_with_the_temporal_cli(client, make_worker, task_queue,
                                                            git_remote, standin, server_address):
    standin.plans = [{"board": GOOD}]
    good = json.dumps({"goal": "greet the world", "repo": str(git_remote.clone), "max_tasks": 3})
    async with make_worker():
        rc, _, err = await run_temporal(server_address, "workflow", "start", "--type",
                                        "PlannerWorkflow", "--task-queue", task_queue,
                                        "--workflow-id", "taskfleet-plan-cli-1", "--input", good)
        assert rc == 0, err
        result = await client.get_workflow_handle("taskfleet-plan-cli-1",
                                                  result_type=PlanResult).result()
        assert result.task_ids == ["G1", "G2"]
        for n, bad in enumerate(
                [json.dumps("just a string"), json.dumps({"goal": "g", "repo": "relative/path"}),
                 json.dumps({"goal": "g", "repo": "/x", "max_tasks": 0}),
                 json.dumps({"goal": "g", "repo": "/x", "colour": "red"})]):
            rc, _, err = await run_temporal(
                server_address, "workflow", "start", "--type", "PlannerWorkflow", "--task-queue",
                task_queue, "--workflow-id", f"taskfleet-plan-bad-{n}", "--input", bad)
            assert rc == 0, err
            with pytest.raises(WorkflowFailureError) as failed:
                await client.get_workflow_handle(f"taskfleet-plan-bad-{n}").result()
            assert reason_of(failed.value).startswith("bad PlannerWorkflow start input: ")

        async def described() -> None:
            done = await client.get_workflow_handle("taskfleet-plan-bad-3").query(
                "status", result_type=PlanStatus)
            assert done.stage == "failed" and "unknown key(s) colour" in done.problems[0], done

        await eventually(described)
