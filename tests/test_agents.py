"""The example boards of examples/agents/ run as written, each agent CLI replaced by a stand-in
executable of the same name that checks the arguments and environment it gets, as the real one needs
them, makes a change, and reports what it cost the way the real one does."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from taskfleet.core.settings import TaskfleetSettings
from tests.conftest import ROOT, GitRemoteFixture, git
from tests.user_cli import taskfleet

AGENTS = ROOT / "examples" / "agents"

# Each stand-in exits 3 naming what it missed, so a board whose flags or environment are wrong fails
# its task with that reason.
COMMON = r'''
import json, os, sys
args = sys.argv[1:]
def need(ok, what):
    if not ok:
        print(f"stand-in {os.path.basename(sys.argv[0])}: {what} (args {args})", file=sys.stderr)
        sys.exit(3)
def flag(name):
    return args[args.index(name) + 1] if name in args else None
need(os.environ.get(KEY), f"{KEY} is not set")
need("WORKER_ONLY_SECRET" not in os.environ, "a worker variable the operator kept back is visible")
def change(prompt):
    need("You are the implementer for task" in prompt, "the prompt is not the task's")
    task = os.environ["TASKFLEET_TASK_ID"]
    need(f"task {task}" in prompt, "the prompt names another task")
    with open(f"agent-{task}.md", "w") as out:
        out.write(f"{task}: done by {os.path.basename(sys.argv[0])}\n")
'''  # noqa: E501 (a script's text: its lines are the code it runs)

CLAUDE = COMMON.replace("KEY", "'ANTHROPIC_API_KEY'") + r'''
need(args[:1] == ["-p"], "-p (headless) must come first")
need(flag("--output-format") == "json", "--output-format json")
need(flag("--permission-mode") in ("acceptEdits", "bypassPermissions"), "a mode that edits")
need("Edit" in (flag("--allowedTools") or ""), "--allowedTools with Edit")
change(sys.stdin.read())
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "done",
                  "total_cost_usd": 0.25, "usage": {"input_tokens": 1000, "output_tokens": 200}}))
'''  # noqa: E501 (a script's text)

CODEX = COMMON.replace("KEY", "'OPENAI_API_KEY'") + r'''
need(args[:1] == ["exec"], "exec (non-interactive) must come first")
need("--json" in args, "--json")
need(flag("--sandbox") == "workspace-write", "--sandbox workspace-write (read-only otherwise)")
need(args[-1] == "-", "the prompt from stdin (-)")
change(sys.stdin.read())
print(json.dumps({"type": "thread.started", "thread_id": "t1"}))
usage = {"input_tokens": 700, "cached_input_tokens": 100, "output_tokens": 50}
print(json.dumps({"type": "turn.completed", "usage": usage}))
'''  # noqa: E501 (a script's text)

AIDER = COMMON.replace("KEY", "'ANTHROPIC_API_KEY'") + r'''
need(flag("--message-file"), "--message-file")
for name in ("--yes-always", "--no-auto-commits", "--no-gitignore"):
    need(name in args, name)
change(open(flag("--message-file")).read())
print("Applied edit to agent file")
print("Tokens: 2.1k sent, 300 received. Cost: $0.0040 message, $0.0040 session.")
'''


@pytest.fixture
def agent_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-ins on the worker's PATH, the keys in its environment,
    one secret it must not pass on."""
    folder = tmp_path / "agent-bin"
    folder.mkdir()
    for name, body in (("claude", CLAUDE), ("codex", CODEX), ("aider", AIDER)):
        path = folder / name
        path.write_text(f"#!{sys.executable}\n{body}")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-standin")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-standin")
    monkeypatch.setenv("WORKER_ONLY_SECRET", "never-shown")
    return folder


@pytest.mark.parametrize("board, cost, tokens", [
    ("claude-code.toml", "$0.5000", "in 2000 out 400"),
    ("codex.toml", "$0.0000", "in 1400 out 100"),
    ("aider.toml", "$0.0080", "in 0 out 0"),
])
async def test_an_example_agent_board_runs_as_written(board, cost, tokens, agent_bin,
                                                      server_address, task_queue, make_worker,
                                                      git_remote: GitRemoteFixture, tmp_path):
    user_dir = tmp_path / "user"
    user_dir.mkdir()
    shutil.copy(AGENTS / board, user_dir / board)
    settings = TaskfleetSettings(state_dir=tmp_path / "state",
                                 task_env="ANTHROPIC_API_KEY,OPENAI_API_KEY")
    async with make_worker(settings=settings):
        done = await taskfleet(server_address, "run", board, "--repo", str(git_remote.clone),
                               "--verify", 'test -f "agent-$TASKFLEET_TASK_ID.md"', cwd=user_dir,
                               task_queue=task_queue, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"agents: 2 usage report(s), tokens {tokens}, {cost} as reported" in done.stdout, \
        done.stdout
    for task in ("docs-contributing", "typing-utils"):
        landed = git_remote.remote_ref(f"task/{task}")
        assert landed, done.stdout
        tree = git(git_remote.remote, "ls-tree", "--name-only", landed).split()
        assert f"agent-{task}.md" in tree and not any(name.startswith(".aider") for name in tree)


async def test_a_usage_report_reaches_the_run_result(
        agent_bin, server_address, task_queue, make_worker, git_remote: GitRemoteFixture, tmp_path):
    user_dir = tmp_path / "user"
    user_dir.mkdir()
    shutil.copy(AGENTS / "claude-code.toml", user_dir / "board.toml")
    settings = TaskfleetSettings(state_dir=tmp_path / "state", task_env="ANTHROPIC_API_KEY")
    async with make_worker(settings=settings):
        done = await taskfleet(server_address, "run", "board.toml", "--repo", str(git_remote.clone),
                               "--json", "--verify", 'test -f "agent-$TASKFLEET_TASK_ID.md"',
                               cwd=user_dir, task_queue=task_queue, timeout=180)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["stats"]["agent_reports"] == 2
            and result["stats"]["agent_cost_usd"] == pytest.approx(0.5))
    assert [t["agent_cost_usd"] for t in result["tasks"]] == [0.25, 0.25]
