"""The judge end to end: after verify passes and before landing. Real Temporal server, real git,
the real `anthropic` client talking HTTP to the bundled stand-in; judge commands run through the
executor in the task's worktree."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from taskfleet.clients.orchestrator import start_board
from taskfleet.core.boards import parse_toml_board
from taskfleet.core.llm_ids import judge_workflow_id, llm_task_workflow_id
from taskfleet.core.models.orchestrator import OrchestratorProgress, OrchestratorResult, TaskOutcome
from taskfleet.testing.standin import StandIn
from tests.conftest import GitRemoteFixture, eventually, git, save_history
from tests.llm_support import standin_env
from tests.user_cli import taskfleet

EDITS_1 = [{"path": "calc.txt", "old_text": "", "new_text": "answer = 42\n"}]
EDITS_2 = [{"path": "calc.txt", "old_text": "", "new_text": "answer = compute()\n"}]
REVISE = {"verdict": "revise", "reasons": ["calc.txt hard-codes the answer"],
          "comments": [{"path": "calc.txt", "line": 1, "text": "compute it instead of writing 42"}]}
APPROVE = {"verdict": "approve", "reasons": ["does the task"], "comments": []}
REJECT = {"verdict": "reject",
          "reasons": ["the change deletes the test instead of fixing the code"], "comments": []}


@pytest.fixture
def standin() -> Iterator[StandIn]:
    with standin_env() as server:
        server.default = lambda task_id, params: {"edits": EDITS_2, "summary": "compute it"}
        yield server


def claude_board(n: int = 1, **settings: object) -> str:
    """Claude tasks whose change is calc.txt, judged by Claude."""
    lines = ['name = "judged"', 'implementer = "anthropic"', 'judge = "anthropic"',
             'verify = "test -f calc.txt"', 'task_type = "judge-test"', "timeout_seconds = 60",
             "max_parallel = 8", "llm_batch = false"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    for i in range(1, n + 1):
        lines += ["", "[[tasks]]", f'id = "J{i}"', 'scope = "write calc.txt with the answer"']
    return "\n".join(lines) + "\n"


def command_board(tasks: list[dict], **settings: object) -> str:
    lines = ['name = "judged-commands"', 'task_type = "judge-test"', "timeout_seconds = 60",
             "max_parallel = 8"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    for task in tasks:
        lines += ["", "[[tasks]]"] + [f"{k} = {json.dumps(v)}" for k, v in task.items()]
    return "\n".join(lines) + "\n"


async def run(client: Client, task_queue: str, fx: GitRemoteFixture, text: str,
              workflow_id: str | None = None, **options) -> OrchestratorResult:
    handle = await start_board(client, parse_toml_board(text), str(fx.clone), task_queue=task_queue,
                               git_max_batch_age_seconds=1, workflow_id=workflow_id, **options)
    return await handle.result()


def by_id(result: OrchestratorResult) -> dict[str, TaskOutcome]:
    return {t.id: t for t in result.tasks}


def lessons(settings) -> list[dict]:
    path = Path(settings.lessons_path)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# --- a Claude judge of Claude tasks ---------------------------------------------------------------


@pytest.mark.smoke
async def test_approve_lands(client, make_worker, task_queue, git_remote, standin):
    standin.script = {"J1": [{"edits": EDITS_2, "summary": "compute it"}]}
    standin.reviews = {"J1": [APPROVE]}
    async with make_worker():
        result = await run(client, task_queue, git_remote, claude_board())
    (task,) = result.tasks
    assert task.status == "succeeded" and task.landed and task.verdict == "approve", task
    assert git(git_remote.remote, "show", f"{task.commit}:calc.txt") == "answer = compute()"
    (review,) = standin.requests_for("submit_review")
    params = review["params"]
    assert params["tool_choice"] == {"type": "tool", "name": "submit_review"}
    prompt = params["messages"][0]["content"][0]["text"]
    assert "Task id: J1" in prompt and "Scope: write calc.txt with the answer" in prompt
    assert "+answer = compute()" in prompt and "calc.txt" in prompt  # the diff and its stat
    assert "The verify command `test -f calc.txt` exited 0" in prompt
    s = result.stats
    assert (s.judge_calls, s.judge_approved, s.judge_revised, s.judge_rejected,
            s.judge_api_calls) == (1, 1, 0, 0, 1)
    assert s.judge_input_tokens > 0 and s.judge_cost_usd > 0
    assert s.llm_requests == 2 and s.llm_api_calls == 2  # the implementer's request and the judge's


async def test_revise_makes_a_second_attempt_that_lands(client, make_worker, task_queue, git_remote,
                                                        standin, settings):
    standin.script = {"J1": [{"edits": EDITS_1, "summary": "write 42"},
                             {"edits": EDITS_2, "summary": "compute it"}]}
    standin.reviews = {"J1": [REVISE, APPROVE]}
    async with make_worker():
        handle = await start_board(client, parse_toml_board(claude_board()), str(git_remote.clone),
                                   task_queue=task_queue, git_max_batch_age_seconds=1,
                                   workflow_id="orchestrator_judged")
        result = await handle.result()
        child = client.get_workflow_handle(llm_task_workflow_id(handle.id, "J1"))
        histories = {"orchestrator_judged": await handle.fetch_history(),
                     "llm_task_judged_revise": await child.fetch_history(),
                     "judge_workflow_revise": await client.get_workflow_handle(
                         judge_workflow_id(handle.id, "J1", 1)).fetch_history()}
    for name, history in histories.items():
        save_history(name, history.to_json())
    (task,) = result.tasks
    assert task.status == "succeeded" and task.landed and task.verdict == "approve", task
    assert git(git_remote.remote, "show", f"{task.commit}:calc.txt") == "answer = compute()"
    second = standin.requests_for("apply_edits")[1]["params"]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    feedback = second[2]["content"][0]
    assert feedback["type"] == "tool_result" and feedback["is_error"] is True
    assert "calc.txt hard-codes the answer" in feedback["content"]
    assert "calc.txt:1: compute it instead of writing 42" in feedback["content"]
    assert "+answer = compute()" in (standin.requests_for("submit_review")[1]["params"]
                                     ["messages"][0]["content"][0]["text"])
    s = result.stats
    assert ((s.judge_calls, s.judge_approved, s.judge_revised) == (2, 1, 1)
            and task.llm_requests == 4)
    judged = [x for x in lessons(settings) if x["activity_type"] == "judge"]
    assert ([x["failure_type"] for x in judged] == ["judge_revise"]
            and "hard-codes" in judged[0]["failure_msg"])


async def test_reject_fails_with_the_reasons_and_lands_nothing(
        client, make_worker, task_queue, git_remote, standin, settings):
    standin.reviews = {"J1": [REJECT]}
    async with make_worker():
        result = await run(client, task_queue, git_remote, claude_board())
    (task,) = result.tasks
    assert task.status == "failed" and not task.landed and task.verdict == "reject", task
    assert task.reason == (
        "rejected by the judge: the change deletes the test instead of fixing the code")
    assert git_remote.remote_ref("task/J1") is None and git_remote.pushes() == 0
    assert result.stats.judge_rejected == 1
    assert [x["failure_type"] for x in lessons(settings) if x["activity_type"] == "judge"] == [
        "judge_reject"]


async def test_revise_with_no_attempt_left_fails_naming_the_reasons(
        client, make_worker, task_queue, git_remote, standin):
    standin.reviews = {"J1": [REVISE]}
    async with make_worker():
        result = await run(client, task_queue, git_remote, claude_board(max_attempts=1))
    (task,) = result.tasks
    assert task.status == "failed" and not task.landed and task.verdict == "revise"
    assert ("the judge still asks for changes after 1 attempt(s) (max_attempts 1): "
            "calc.txt hard-codes" in task.reason)


async def test_a_malformed_review_gets_one_retry_then_a_clear_failure(
        client, make_worker, task_queue, git_remote, standin):
    standin.reviews = {"J1": [{"input": {"verdict": "maybe", "reasons": []}}, APPROVE],
                       "J2": [{"no_tool": True},
                              {"input": {"verdict": "approve", "reasons": "fine"}}]}
    async with make_worker():
        result = await run(client, task_queue, git_remote, claude_board(2))
    tasks = by_id(result)
    assert tasks["J1"].status == "succeeded" and tasks["J1"].landed, tasks["J1"]
    retry = ([r for r in standin.requests_for("submit_review") if r["task"] == "J1"][1]
             ["params"]["messages"])
    assert (retry[2]["content"][0]["type"] == "tool_result"
            and "verdict must be one of" in retry[2]["content"][0]["content"])
    assert tasks["J2"].status == "failed" and not tasks["J2"].landed
    assert tasks["J2"].reason == ("judge: the judge's answer broke submit_review's schema twice: "
                                  "reasons must be a list of strings"), tasks["J2"].reason
    assert result.stats.judge_invalid == 3 and result.stats.judge_calls == 4


# --- judge commands -----------------------------------------------------------------------------


DRAFT_OR_FIXED = ('if [ -n "$TASKFLEET_REVIEW_FILE" ]; then cat "$TASKFLEET_REVIEW_FILE"; '
                  'echo fixed > out.txt; else echo draft > out.txt; fi')
JUDGE_FIXED = ('if grep -q "^+fixed"; then echo "ok"; '
               'else echo "out.txt:1: say fixed, not draft"; exit 2; fi')


async def test_a_command_judge_approves_revises_and_rejects(
        client, make_worker, task_queue, git_remote, settings):
    board = command_board([
        {"id": "A", "run": "echo hello > out.txt", "verify": "test -f out.txt",
         "judge_run": 'grep -q "^+hello" && echo "says hello"'},
        {"id": "R", "run": DRAFT_OR_FIXED, "verify": "test -f out.txt", "judge_run": JUDGE_FIXED},
        {"id": "X", "run": "echo bad > out.txt", "verify": "test -f out.txt",
         "judge_run": 'echo "the change deletes a test"; echo "tests/t.py:3: keep this test"; '
                      'exit 1'},
    ])
    async with make_worker():
        handle = await start_board(client, parse_toml_board(board), str(git_remote.clone),
                                   task_queue=task_queue, git_max_batch_age_seconds=1,
                                   workflow_id="orchestrator_judged_commands")
        result = await handle.result()
        save_history("orchestrator_judged_commands", (await handle.fetch_history()).to_json())
    tasks = by_id(result)
    assert tasks["A"].landed and tasks["A"].verdict == "approve", tasks["A"]
    assert tasks["R"].landed and tasks["R"].verdict == "approve", tasks["R"]
    commit = tasks["R"].commit
    assert git(git_remote.remote, "show", f"{commit}:out.txt") == "fixed"
    # on attempt 1's commit
    assert git(git_remote.remote, "log", "--format=%s", f"{commit}").splitlines()[1:2] == ["R"]
    log = Path(tasks["R"].log_path).read_text()
    assert "out.txt:1: say fixed, not draft" in log  # the review file, as the second run printed it
    review_file = Path(tasks["R"].log_path).with_name(
        Path(tasks["R"].log_path).stem + ".review.json")
    assert json.loads(review_file.read_text())["verdict"] == "revise"
    assert "review.json" not in git(git_remote.remote, "ls-tree", "-r", "--name-only", commit)
    assert (tasks["X"].status == "failed" and not tasks["X"].landed
            and tasks["X"].verdict == "reject")
    assert tasks["X"].reason == (
        "rejected by the judge: the change deletes a test; tests/t.py:3: keep this test")
    assert git_remote.remote_ref("task/X") is None
    s = result.stats
    assert (s.judge_calls, s.judge_approved, s.judge_revised, s.judge_rejected) == (4, 2, 1, 1)
    assert s.judge_api_calls == 0 and s.llm_requests == 0
    judged = sorted(x["failure_type"] for x in lessons(settings) if x["activity_type"] == "judge")
    assert judged == ["judge_reject", "judge_revise"]


async def test_a_judge_command_reads_the_diff_in_the_tasks_worktree(
        client, make_worker, task_queue, git_remote):
    """Its stdin is the whole diff against the base; its folder is a checkout of
    the task's commit."""
    judge = ('cat > "$TASKFLEET_WORKTREE.judge-stdin"; test "$(cat out.txt)" = hello'
             ' && test -f "$TASKFLEET_PROMPT_FILE"')
    board = command_board(
        [{"id": "W", "run": "echo hello > out.txt", "verify": "true", "judge_run": judge}])
    async with make_worker():
        result = await run(client, task_queue, git_remote, board)
    (task,) = result.tasks
    assert task.landed and task.verdict == "approve", task


# --- plumbing: batches, the result cache ----------------------------------------------------------


async def test_three_judge_requests_go_in_one_batch(client, make_worker, task_queue,
                                                    git_remote, standin):
    board = command_board(
        [{"id": f"B{i}", "run": f"echo {i} > out.txt", "verify": "true"} for i in range(1, 4)],
        judge="anthropic", llm_batch=True, llm_batch_max_size=3, llm_batch_max_age_seconds=30)
    async with make_worker():
        result = await run(client, task_queue, git_remote, board)
    assert all(t.landed and t.verdict == "approve" for t in result.tasks), result.tasks
    assert len(standin.requests_for("submit_review")) == 3 and standin.batch_sizes() == [3]
    assert standin.calls["batches.create"] == 1 and standin.calls["messages.create"] == 0
    s = result.stats
    assert (s.judge_calls, s.judge_api_calls, s.llm_api_calls, s.llm_requests) == (3, 1, 1, 3)


async def test_a_second_run_of_the_same_board_makes_no_judge_call(
        client, make_worker, task_queue, git_remote, standin):
    """Verdicts are kept by model + request + tree (a new lesson in the request asks
    the judge again)."""
    commands = command_board([{"id": f"C{i}", "run": f"echo {i} > out.txt", "verify": "true"}
                              for i in (1, 2)], judge="anthropic", llm_batch=False)
    async with make_worker():
        first = [await run(client, task_queue, git_remote, commands),
                 await run(client, task_queue, git_remote, claude_board())]
        calls = dict(standin.calls)
        second = [await run(client, task_queue, git_remote, commands),
                  await run(client, task_queue, git_remote, claude_board())]
    for result in first + second:
        assert all(t.landed and t.verdict == "approve" for t in result.tasks), result.tasks
    # none the second time
    assert dict(standin.calls) == calls, [(r["task"], r["tool"]) for r in standin.requests][4:]
    assert second[0].stats.judge_cache_hits == 2 and second[0].stats.judge_calls == 0
    assert second[1].stats.judge_cache_hits == 1 and second[1].stats.llm_api_calls == 0
    (claude,) = second[1].tasks
    assert (claude.cache_hit
            and git(git_remote.remote, "show", f"{claude.commit}:calc.txt") == "answer = compute()")


# --- what a person sees --------------------------------------------------------------------------


async def test_progress_shows_each_tasks_stage_and_last_verdict(
        client, make_worker, task_queue, git_remote, standin, tmp_path, server_address):
    gate = tmp_path / "go"
    # the task's own command waits for the test
    verify = f'while [ ! -f "{gate}" ]; do sleep 0.05; done'
    board = command_board([{"id": "V", "run": "echo v > out.txt", "verify": verify}],
                          judge="anthropic", llm_batch=True, llm_batch_max_size=1)
    # the judge's batch stays in progress until the test lets it end
    standin.batch_polls = 1_000_000
    async with make_worker():
        handle = await start_board(client, parse_toml_board(board), str(git_remote.clone),
                                   task_queue=task_queue, git_max_batch_age_seconds=1)

        async def at(stage: str) -> OrchestratorProgress:
            progress = await handle.query("progress", result_type=OrchestratorProgress)
            assert [(t.id, t.stage) for t in progress.tasks] == [("V", stage)], progress.tasks
            return progress

        await eventually(lambda: at("verifying"))
        gate.write_text("go")
        await eventually(lambda: at("judging"))
        shown = await taskfleet(server_address, "status", handle.id, cwd=tmp_path)
        assert shown.returncode == 0 and "V" in shown.stdout and "judging" in shown.stdout, shown
        await handle.signal("task_stage", "not a stage")
        await handle.signal("task_stage", {"task_id": "V", "stage": "dancing"})
        refused = await eventually(lambda: _refused(handle, 2))
        assert "stage must be one of" in refused[1]
        standin.batch_polls = 0
        with standin._lock:
            for batch in standin._batches.values():
                batch.polls_left = 0
        result = await handle.result()
        final = await handle.query("progress", result_type=OrchestratorProgress)
    assert result.tasks[0].landed and result.tasks[0].verdict == "approve"
    assert [(t.stage, t.verdict) for t in final.tasks] == [("", "approve")]


async def _refused(handle, count: int) -> list[str]:
    progress = await handle.query("progress", result_type=OrchestratorProgress)
    assert len(progress.rejected) == count, progress.rejected
    return progress.rejected


async def test_the_judge_comes_before_a_merge_too(client, make_worker, task_queue, git_remote):
    """land = "merge": an approved change is merged into the base;
    a rejected one never reaches it."""
    before = git_remote.remote_ref("main")
    board = command_board([
        {"id": "M1", "run": "echo merged > m1.txt", "verify": "true", "judge_run": "echo fine"},
        {"id": "M2", "run": "echo nope > m2.txt", "verify": "true",
         "judge_run": "echo 'out of scope'; exit 1"},
    ], land="merge")
    async with make_worker():
        result = await run(client, task_queue, git_remote, board)
    tasks = by_id(result)
    assert tasks["M1"].landed and not tasks["M2"].landed and tasks["M2"].verdict == "reject"
    main = git_remote.remote_ref("main")
    assert main != before and git(git_remote.remote, "show", f"{main}:m1.txt") == "merged"
    assert "m2.txt" not in git(git_remote.remote, "ls-tree", "--name-only", main)
