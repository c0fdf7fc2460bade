"""Issue 11: every example in README.md works as written.

Shell blocks: each command line is checked against the real parser of the program it calls (the
`taskfleet` CLI's argparse parser, the worker's, the Makefile's targets, the `temporal` CLI's own
flag parsing); those that need no server are run verbatim. Python blocks compile; the plugin snippet
runs in tests/test_plugin_user_module.py.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from taskfleet.cli.main import build_parser
from taskfleet.devserver.server import find_temporal_cli
from taskfleet.worker import parse_args as worker_parse_args
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()
BIN = Path(sys.executable).parent


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


def commands() -> list[list[str]]:
    """Every command line of the `sh` blocks, continuation lines joined, comments dropped; `$(...)` too."""
    out = []
    for block in blocks("sh"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if not words:
                continue
            if re.fullmatch(r"[A-Z_]+=\$\(.*", words[0]):  # WF=$(taskfleet git id --repo /path/clone)
                inner = line.split("$(", 1)[1].rsplit(")", 1)[0]
                words = shlex.split(inner)
            out.append(words)
    return out


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M))


def check(words: list[str]) -> None:
    program, args = words[0], words[1:]
    if program == "make":
        assert set(args) <= makefile_targets(), words
    elif program == "." and args == [".venv/bin/activate"]:
        assert (BIN / "activate").is_file()
    elif program == "taskfleet":
        try:
            build_parser().parse_args(args)
        except SystemExit as exit_:
            assert exit_.code == 0 and "--help" in args, f"taskfleet's parser refused: {shlex.join(words)}"
    elif program == "taskfleet-worker" or words[:2] == ["python", "worker.py"]:
        worker_parse_args(args[1:] if program == "python" else args)
    elif program == "temporal":
        flags = [a for a in args]
        done = subprocess.run([find_temporal_cli(), *flags, "--help"], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"temporal refused {shlex.join(words)}: {done.stderr.strip()}"
    else:
        pytest.fail(f"README runs a command no test checks: {shlex.join(words)}")


def test_readme_has_examples_to_check():
    found = commands()
    assert len(found) >= 20 and any(w[0] == "taskfleet" for w in found) and any(w[0] == "temporal" for w in found)
    assert README.index(". .venv/bin/activate") < README.index("taskfleet run "), "activation comes first"


@pytest.mark.parametrize("words", commands(), ids=lambda w: shlex.join(w)[:60])
def test_each_shell_command_parses(words: list[str]):
    check(words)


def test_the_checker_refuses_a_wrong_command():
    with pytest.raises(AssertionError):
        check(["taskfleet", "run", "board.md"])  # --repo is required
    with pytest.raises(AssertionError):
        check(["temporal", "workflow", "list", "--no-such-flag"])
    with pytest.raises(AssertionError):
        check(["make", "no-such-target"])


def test_commands_that_need_no_server_run_verbatim(tmp_path: Path):
    """Run as printed, from a folder outside the project, with the activated environment's PATH."""
    import os

    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    ran = 0
    for words in commands():
        if words[0] == "taskfleet" and (words[1:] == ["--help"] or words[1:3] == ["git", "id"]):
            done = subprocess.run(words, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0 and done.stdout.strip(), (words, done.stderr)
            ran += 1
    assert ran >= 2


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_blocks_compile(index: int):
    source = blocks("python")[index]
    compile(source, f"README.md python block {index}", "exec")
    assert not re.search(r"^await ", source, re.M), "no top-level await"
