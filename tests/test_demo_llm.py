"""`taskfleet demo --llm` offline, as a person runs it: implement, judge (one revise round),
land."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import git
from tests.user_cli import taskfleet

# one of the longest files: `make test` starts it early
pytestmark = pytest.mark.heavy(seconds=24, waits=True)


async def test_the_llm_demo_implements_judges_revises_once_and_lands_offline(
        server_address, tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    done = await taskfleet(server_address, "demo", "--llm", "--no-wait", "--state-dir",
                           str(tmp_path / "state"), cwd=tmp_path, env=env, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "OFFLINE STAND-IN" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line[:2] in ("C1", "C2", "C3")}
    assert all(row[1:3] == ["succeeded", "yes"] and "approve" in row for row in rows.values()), rows
    assert "Judge: 4 verdict(s) (approve 3, revise 1, reject 0)" in out
    assert "(4 implementer, 4 judge)" in out
    remote = tmp_path / "state" / "demo" / "remote.git"
    commit = git(remote, "rev-parse", "task/C1-add")
    # the revised answer landed
    assert "add(-1, 1)" in git(remote, "show", f"{commit}:tests/test_add.py")
