"""The command runner: what starts directly and what goes through `sh`, on real processes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from taskfleet.activities.processes.executor import direct_argv, run_command, tail


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("sleep 0.2", ["sleep", "0.2"]),
        ("  pytest -q tests/unit  ", ["pytest", "-q", "tests/unit"]),
        ("python3 -m pip --version=1", ["python3", "-m", "pip", "--version=1"]),
        ("true", None),  # a builtin
        ("cd sub", None),
        ("FOO=1 make", None),  # an assignment
        ("echo $HOME", None),
        ("ls *.py", None),
        ("make && make test", None),
        ("grep -q x 'a b'", None),
        ("cat < in", None),
        ("exit 3", None),
        ("ls ~", None),
        ("a\nb", None),
        ("", None),
    ],
)
def test_only_commands_without_shell_syntax_start_directly(command, argv):
    assert direct_argv(command) == argv


async def _run(tmp_path: Path, command: str, timeout: float = 10):
    log_path = tmp_path / "task.log"
    with open(log_path, "a+b") as log:
        ran = await run_command(command, tmp_path, dict(os.environ), log, timeout,
                                lambda: None, "run")
        return ran, tail(log)


async def test_direct_and_shell_commands_log_their_output_and_exit_codes(tmp_path: Path):
    ran, output = await _run(tmp_path, "printf direct")
    assert (ran.exit_code, ran.timed_out) == (0, False)
    assert output.endswith("$ (run) printf direct\ndirect")
    ran, output = await _run(tmp_path, "printf '%s' shell; exit 3")
    assert ran.exit_code == 3 and output.endswith("shell")


async def test_a_missing_program_fails_as_sh_reports_it(tmp_path: Path):
    ran, output = await _run(tmp_path, "no-such-program-taskfleet --flag")
    assert ran.exit_code == 127
    assert "no-such-program-taskfleet" in output and "not found" in output


async def test_a_script_without_shebang_still_runs_through_sh(tmp_path: Path):
    script = tmp_path / "step"
    script.write_text("echo from-script\nexit 4\n")
    script.chmod(0o755)
    ran, output = await _run(tmp_path, "./step")
    assert ran.exit_code == 4 and "from-script" in output


async def test_a_program_killed_by_a_signal_reports_128_plus_the_signal(tmp_path: Path):
    # `kill` the direct child itself: it is the process, no shell in between.
    helper = tmp_path / "suicide"
    helper.write_text("#!/bin/sh\nkill -TERM $$\n")
    helper.chmod(0o755)
    ran, _ = await _run(tmp_path, "./suicide")
    assert ran.exit_code == 143


async def test_timeout_kills_a_direct_command(tmp_path: Path):
    ran, output = await _run(tmp_path, "sleep 30", timeout=0.3)
    assert ran.timed_out and ran.exit_code is None
    assert "timed out after 0.3s" in output
