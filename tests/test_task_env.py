"""What a task's processes see of the worker's environment: the rules (taskfleet/core/task_env.py)
and the executor applying them to real processes, whatever environment a caller hands it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from taskfleet.activities.processes.executor import run_command
from taskfleet.activities.processes.executor_policy import (
    ExecutorPolicy,
    current_policy,
    using_policy,
)
from taskfleet.core.boards import BoardError, parse_toml_board
from taskfleet.core.task_env import TaskEnvError, TaskEnvironment, parse_allow_list

WORKER = {
    "PATH": "/usr/bin:/bin", "HOME": "/home/w", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC",
    "GIT_AUTHOR_NAME": "w", "GIT_COMMITTER_EMAIL": "w@x",
    "ANTHROPIC_API_KEY": "sk-ant-secret", "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "GITHUB_TOKEN": "ghp-secret", "TEMPORAL_API_KEY": "tmprl-secret",
    "NPM_TOKEN": "npm-1", "PIP_INDEX_URL": "https://pip", "OTHER": "x",
    "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
    "GIT_CONFIG_VALUE_0": "Authorization: Bearer gh",
}


def test_a_task_gets_the_base_its_own_variables_and_only_what_the_operator_allows():
    rules = TaskEnvironment(parse_allow_list("NPM_TOKEN, PIP_*"), WORKER)
    env = rules.build({"TASKFLEET_TASK_ID": "T1"})
    assert env == {
        "PATH": "/usr/bin:/bin", "HOME": "/home/w", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "TZ": "UTC", "GIT_AUTHOR_NAME": "w", "GIT_COMMITTER_EMAIL": "w@x",
        "NPM_TOKEN": "npm-1", "PIP_INDEX_URL": "https://pip", "TASKFLEET_TASK_ID": "T1",
    }


def test_a_caller_that_hands_over_the_worker_s_whole_environment_is_filtered_too():
    """Code that builds `{**os.environ, ...}` (an older call site, another feature's command) still
    gives the task nothing the rules do not: what equals the worker's own is inherited."""
    rules = TaskEnvironment((), WORKER)
    env = rules.build({**WORKER, "TASKFLEET_TASK_ID": "T1", "PATH": "/opt/tool/bin:/usr/bin",
                       "MY_FLAG": "1", "GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_1": "gc.autoDetach",
                       "GIT_CONFIG_VALUE_1": "false"})
    for secret in ("ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "TEMPORAL_API_KEY",
                   "NPM_TOKEN", "OTHER"):
        assert secret not in env
    # set by the caller: kept
    assert env["PATH"] == "/opt/tool/bin:/usr/bin" and env["MY_FLAG"] == "1"
    # the worker's own git config pair (an auth header) is dropped; the caller's is
    # renumbered from 0
    assert env["GIT_CONFIG_COUNT"] == "1"
    assert (env["GIT_CONFIG_KEY_0"], env["GIT_CONFIG_VALUE_0"]) == ("gc.autoDetach", "false")
    assert "Bearer" not in "".join(env.values())


def test_refused_and_missing_names_are_told_apart():
    rules = TaskEnvironment(("NPM_TOKEN", "YARN_*"), WORKER)
    assert rules.refused(["NPM_TOKEN", "PATH", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY"]) == [
        "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"]
    assert rules.missing(["NPM_TOKEN", "YARN_TOKEN"]) == ["YARN_TOKEN"]


@pytest.mark.parametrize("text", ["NPM_TOKEN;rm", "A=B", "$HOME", "a b/c"])
def test_an_allow_list_that_is_not_names_or_patterns_is_refused(text):
    with pytest.raises(TaskEnvError, match="TASKFLEET_TASK_ENV"):
        parse_allow_list(text)


@pytest.mark.parametrize("value, fragment", [
    ('"NPM_TOKEN"', "must be a list"),
    ('["NPM TOKEN"]', "not an environment variable name"),
    ('["A*"]', "not an environment variable name"),
    ("[1]", "not an environment variable name"),
])
def test_a_board_s_env_must_be_a_list_of_names(value, fragment):
    board_wide = f'env = {value}\nrun = "true"\nverify = "true"\n[[tasks]]\nid = "A"\n'
    per_task = f'run = "true"\nverify = "true"\n[[tasks]]\nid = "A"\nenv = {value}\n'
    for text in (board_wide, per_task):
        with pytest.raises(BoardError, match=fragment):
            parse_toml_board(text)


def test_env_is_a_board_default_a_task_may_replace():
    board = parse_toml_board('env = ["NPM_TOKEN"]\nrun = "true"\nverify = "true"\n'
                             '[[tasks]]\nid = "A"\n[[tasks]]\nid = "B"\nenv = ["PIP_INDEX_URL"]\n')
    assert [t.env for t in board.tasks] == [["NPM_TOKEN"], ["PIP_INDEX_URL"]]


async def test_a_real_command_sees_only_what_the_rules_give(tmp_path: Path, monkeypatch):
    """The executor applies the worker's rules to the process it starts, not just to a dict."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-for-the-executor")
    monkeypatch.setenv("NPM_TOKEN", "npm-for-the-executor")
    policy = ExecutorPolicy(TaskEnvironment(("NPM_TOKEN",)), current_policy().trees)
    with using_policy(policy), open(tmp_path / "log", "a+b") as log:
        ran = await run_command("env > seen.txt", tmp_path,
                                {**os.environ, "TASKFLEET_TASK_ID": "T9"}, log, 30,
                                lambda: None, "run")
    assert ran.exit_code == 0
    seen = dict(line.split("=", 1) for line in (tmp_path / "seen.txt").read_text().splitlines()
                if "=" in line)
    assert seen["TASKFLEET_TASK_ID"] == "T9" and seen["NPM_TOKEN"] == "npm-for-the-executor"
    assert "AWS_SECRET_ACCESS_KEY" not in seen
    # an executor's git keeps maintenance in the foreground
    assert seen["GIT_CONFIG_KEY_0"] == "gc.autoDetach"
