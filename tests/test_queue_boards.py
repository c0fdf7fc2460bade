"""Boards that land through the merge queue (`land = "queue"`): real commands and the Claude
stand-in, a real server, real git; tasks the queue sends back are redone on the new tip, or fail
with its reason."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from taskfleet.clients.merge_queue import merge_queue_workflow_id
from taskfleet.clients.orchestrator import start_board
from taskfleet.core.boards import BoardError, parse_toml_board
from taskfleet.core.models.merge_queue import MergeQueueStatus
from taskfleet.core.models.orchestrator import OrchestratorResult
from taskfleet.core.names import QUERY_STATUS
from taskfleet.testing.standin import StandIn
from tests.conftest import GitRemoteFixture, git, save_history
from tests.llm_support import standin_env
from tests.test_merge_queue import VERIFY, library_remote
from tests.user_cli import assert_one_line_refusal, taskfleet

# Task A renames greet -> hello (with its test); task B adds a test that calls greet. Each passes
# alone.
RENAME = "sed -i s/greet/hello/g lib.py tests/test_greet.py"
CALLER = "sed s/test_greet/test_caller/ tests/test_greet.py > tests/test_caller.py"


def toml(settings: dict, tasks: list[dict]) -> str:
    def value(v: object) -> str:
        return (json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool)
                else str(v))

    lines = [f"{k} = {value(v)}" for k, v in settings.items()]
    for task in tasks:
        lines += ["", "[[tasks]]"] + [f"{k} = {value(v)}" for k, v in task.items()]
    return "\n".join(lines) + "\n"


async def run_board(client, task_queue: str, fx: GitRemoteFixture, text: str,
                    **options) -> OrchestratorResult:
    handle = await start_board(client, parse_toml_board(text), str(fx.clone),
                               task_queue=task_queue, **options)
    return await handle.result()


async def queue_status(client, fx: GitRemoteFixture, task_queue: str) -> MergeQueueStatus:
    handle = client.get_workflow_handle(
        merge_queue_workflow_id(str(fx.clone), "origin", "main", task_queue))
    return await handle.query(QUERY_STATUS, result_type=MergeQueueStatus)


def passes_verify(fx: GitRemoteFixture, tmp: Path) -> bool:
    checkout = tmp / "fresh"
    git(tmp, "clone", "-q", str(fx.remote), str(checkout))
    return subprocess.run(VERIFY, shell=True, cwd=checkout, capture_output=True).returncode == 0


async def test_two_tasks_that_pass_alone_but_break_together_one_is_rejected_with_its_output(
    client, make_worker, task_queue, tmp_path, settings
):
    fx = library_remote(tmp_path)
    text = toml(
        {"name": "semantic", "land": "queue", "verify": VERIFY, "max_parallel": 2,
         "queue_retries": 0, "task_type": "lib", "queue_parallel": 2, "queue_flake_retries": 2},
        [{"id": "A", "scope": "rename greet to hello", "run": RENAME},
         {"id": "B", "scope": "test a caller of greet", "run": CALLER}])
    async with make_worker():
        # The replay test names a history's workflow by its file name: this run uses that
        # name as its id.
        handle = await start_board(client, parse_toml_board(text), str(fx.clone),
                                   task_queue=task_queue, workflow_id="orchestrator_queue_semantic")
        result = await handle.result()
        save_history("orchestrator_queue_semantic", (await handle.fetch_history()).to_json())
        status = await queue_status(client, fx, task_queue)
    by_id = {t.id: t for t in result.tasks}
    landed = [t for t in result.tasks if t.landed]
    failed = [t for t in result.tasks if t.status == "failed"]
    assert len(landed) == 1 and len(failed) == 1, result.tasks
    assert "the merge queue answered rejected" in failed[0].reason and "verify" in failed[
        0].reason, failed[0]
    # the verify output's tail says why
    assert "greet" in failed[0].reason or "hello" in failed[0].reason
    assert passes_verify(fx, tmp_path)
    # task branches are not pushed
    assert fx.remote_ref("task/A") is None and fx.remote_ref("task/B") is None
    git(fx.remote, "merge-base", "--is-ancestor", landed[0].commit, "main")
    s = result.stats
    assert (s.queue_landed, s.queue_rejected, s.queue_resubmits, s.pushes) == (1, 1, 0, 1), s
    # The board's queue settings reached the queue; a culprit took three red runs of its merge.
    assert (status.config.parallel, status.config.flake_retries) == (2, 2), status.config
    assert status.stats.confirm_runs >= 2, status.stats
    assert "red 3 times" in failed[0].reason, failed[0]
    # Its entry carried the paths it changed, which the queue's lesson keeps.
    [lesson] = [json.loads(line) for line in settings.lessons_path.read_text().splitlines()
                if json.loads(line)["activity_type"] == "queue"]
    changed = {"A": ["lib.py", "tests/test_greet.py"], "B": ["tests/test_caller.py"]}[failed[0].id]
    assert lesson["metadata"]["files"] == changed, lesson
    assert s.queue_verify_runs == status.stats.verify_runs
    assert s.queue_bisection_steps == status.stats.bisection_steps
    assert s.queue_seconds > 0
    lessons = [json.loads(line) for line in settings.lessons_path.read_text().splitlines()]
    assert [(x["activity_type"], x["failure_type"], x["task_type"])
            for x in lessons] == [("queue", "verify_failed", "lib")]
    assert by_id["A"].commit and by_id["B"].commit


async def test_a_conflicting_command_task_is_redone_on_the_new_tip_and_lands(
        client, make_worker, task_queue, tmp_path):
    fx = library_remote(tmp_path)
    feedback = tmp_path / "feedback"
    feedback.mkdir()
    # Both append a line at the end of shared.txt: whichever merges second conflicts, and its re-run
    # (on the tip that has the other's line) appends after it.
    append = ('printf "%s\\n" "$TASKFLEET_TASK_ID" >> shared.txt; '
              f'if [ -n "$TASKFLEET_QUEUE_ATTEMPT" ]; then printf "%s" "$TASKFLEET_QUEUE_FEEDBACK" '
              f'> "{feedback}/$TASKFLEET_TASK_ID-$TASKFLEET_QUEUE_ATTEMPT"; fi')
    text = toml({"name": "textual", "land": "queue",
                 "verify": "grep -qx \"$TASKFLEET_TASK_ID\" shared.txt", "queue_verify": VERIFY,
                 "max_parallel": 2}, [{"id": "A", "run": append}, {"id": "B", "run": append}])
    async with make_worker():
        result = await run_board(client, task_queue, fx, text)
        status = await queue_status(client, fx, task_queue)
    assert all(t.status == "succeeded" and t.landed for t in result.tasks), result.tasks
    [(redone, attempt)] = [tuple(p.name.rsplit("-", 1)) for p in feedback.iterdir()]
    assert attempt == "1" and "conflicts in shared.txt" in (feedback / f"{redone}-1").read_text()
    other = "A" if redone == "B" else "B"
    assert git(fx.remote, "show", "main:shared.txt").splitlines()[-2:] == [other, redone]
    s = result.stats
    assert (s.queue_landed, s.queue_conflicts, s.queue_resubmits) == (2, 1, 1), s
    assert status.stats.conflicts == 1 and status.stats.landed == 2
    outcome = next(t for t in result.tasks if t.id == redone)
    # the re-run's own commit, made on the tip that holds the other task's line
    git(fx.remote, "merge-base", "--is-ancestor",
        next(t.commit for t in result.tasks if t.id == other), outcome.commit)


@pytest.fixture
def standin():
    with standin_env() as server:
        yield server


async def test_a_claude_task_sent_back_by_the_queue_is_reimplemented_on_the_new_tip(
    client, make_worker, task_queue, tmp_path, standin: StandIn
):
    fx = library_remote(tmp_path)
    # Each task's edit puts its id under the first line of shared.txt: on the same base the two
    # conflict; made again on the tip that has the other's line, it merges.
    def edit(task_id: str) -> dict:
        return {"edits": [{"path": "shared.txt", "old_text": "line 1\n",
                           "new_text": f"line 1\n{task_id}\n"}], "summary": f"add {task_id}"}
    standin.script = {"L1": [edit("L1"), edit("L1")], "L2": [edit("L2"), edit("L2")]}
    text = toml({"name": "claude", "land": "queue", "implementer": "anthropic", "llm_batch": False,
                 "verify": "grep -qx \"$TASKFLEET_TASK_ID\" shared.txt", "queue_verify": VERIFY,
                 "context": ["shared.txt"], "max_parallel": 2, "timeout_seconds": 60},
                [{"id": "L1", "scope": "note L1"}, {"id": "L2", "scope": "note L2"}])
    async with make_worker():
        result = await run_board(client, task_queue, fx, text)
    assert all(t.status == "succeeded" and t.landed for t in result.tasks), result.tasks
    asked = [r["task"] for r in standin.requests]
    [redone] = [t for t in ("L1", "L2") if asked.count(t) == 2]
    other = "L1" if redone == "L2" else "L2"
    second = [r for r in standin.requests if r["task"] == redone][1]["params"]
    prompt = json.dumps(second["messages"])
    assert "merge queue sent your earlier change back" in prompt
    assert "conflicts in shared.txt" in prompt
    assert f"line 1\\n{other}\\n" in prompt  # its context file was read from the new tip
    lines = git(fx.remote, "show", "main:shared.txt").splitlines()
    assert lines[:3] == ["line 1", redone, other], lines
    assert result.stats.queue_resubmits == 1 and result.stats.queue_conflicts == 1
    assert passes_verify(fx, tmp_path)


@pytest.mark.parametrize(("setting", "named"), [
    ("queue_max_batch = 0", "queue_max_batch"),
    ("queue_max_batch = true", "queue_max_batch"),
    ("queue_max_wait_seconds = -1", "queue_max_wait_seconds"),
    ('queue_max_wait_seconds = "soon"', "queue_max_wait_seconds"),
    ("queue_retries = 1.5", "queue_retries"),
    ("queue_retries = 99", "queue_retries"),
    ('queue_target = "bad..name"', "queue_target"),
    ("queue_verify = 7", "queue_verify"),
    ("queue_parallel = 0", "queue_parallel"),
    ("queue_parallel = 65", "queue_parallel"),
    ("queue_flake_retries = -1", "queue_flake_retries"),
    ('queue_flake_retries = "twice"', "queue_flake_retries"),
    ('land = "queues"', "land"),
])
def test_a_bad_queue_setting_refuses_the_board_naming_the_key(setting: str, named: str):
    with pytest.raises(BoardError) as refused:
        land = "" if setting.startswith("land") else 'land = "queue"\n'
        parse_toml_board(f'{land}run = "true"\nverify = "true"\n{setting}\n[[tasks]]\nid = "A"\n')
    assert named in str(refused.value), refused.value


async def test_taskfleet_run_land_queue_as_a_user_runs_it(server_address, task_queue,
                                                          make_worker, tmp_path):
    fx = library_remote(tmp_path)
    board = tmp_path / "board-q.md"
    board.write_text(
        "| ID | Scope | Status | Branch | Verification |\n|---|---|---|---|---|\n"
        "| N1 | a note | [ ] | `task/N1` | prose |\n| N2 | a note | [ ] | `task/N2` | prose |\n")
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'land = "queue"\nrun = "true"\nverify = "true"\nqueue_max_batch = 0\n[[tasks]]\nid = "A"\n')
    write = 'printf "%s\\n" "$TASKFLEET_TASK_ID" > "notes-$TASKFLEET_TASK_ID.txt"'
    async with make_worker():
        done = await taskfleet(server_address, "run", str(board), "--repo", str(fx.clone), "--land",
                               "queue", "--run", write, "--verify", VERIFY, cwd=tmp_path,
                               task_queue=task_queue)
        refused = await taskfleet(server_address, "run", str(bad), "--repo", str(fx.clone),
                                  cwd=tmp_path, task_queue=task_queue)
    assert done.returncode == 0, done.stderr
    assert "merge queue: 2 landed, 0 rejected, 0 conflict(s)" in done.stdout, done.stdout
    assert git(fx.remote, "show", "main:notes-N1.txt") == "N1" and git(
        fx.remote, "show", "main:notes-N2.txt") == "N2"
    assert_one_line_refusal(refused, "queue_max_batch")
