"""Every example in README.md and in the docs pages (docs/*.md) works as written.

Shell blocks: each command line is checked against the real parser of the program it calls (the
`taskfleet` CLI's argparse parser, the worker's, the Makefile's targets, the `temporal` CLI's own
flag parsing, git's usage text, mkdocs's parser, the benchmark scripts' `--help`, and `docker
compose` against docker-compose.yml, since there is no Docker engine to ask); those that need no
server are run verbatim. Python blocks compile (the plugin snippet runs in
tests/test_plugin_user_module.py); TOML blocks use board keys only. The README's links resolve, and
no page names work items or build notes.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from taskfleet.cli.main import build_parser
from taskfleet.core.boards import BOARD_KEYS, parse_toml_board
from taskfleet.devserver.server import find_temporal_cli
from taskfleet.worker import parse_args as worker_parse_args
from tests.conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

README = (ROOT / "README.md").read_text()
PAGES = {"README.md": README} | {
    f"docs/{path.relative_to(ROOT / 'docs')}": path.read_text()
    for path in sorted((ROOT / "docs").rglob("*.md"))
}
BIN = Path(sys.executable).parent


def blocks(language: str, text: str = README) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def page_blocks(language: str) -> list[tuple[str, str]]:
    """(page, block) for every block of `language` in the README and the docs pages."""
    return [(page, block) for page, text in PAGES.items() for block in blocks(language, text)]


def commands(text: str = README) -> list[list[str]]:
    """Every command line of the `sh` blocks, continuation lines joined, comments dropped;
    `$(...)` too."""
    out = []
    for block in blocks("sh", text):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if not words:
                continue
            # WF=$(taskfleet git id --repo /path/clone)
            if re.fullmatch(r"[A-Z_]+=\$\(.*", words[0]):
                inner = line.split("$(", 1)[1].rsplit(")", 1)[0]
                words = shlex.split(inner)
            out.append(words)
    return out


def all_commands() -> list[tuple[str, list[str]]]:
    return [(page, words) for page, text in PAGES.items() for words in commands(text)]


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M))


def makefile_variables() -> set[str]:
    """Variables the Makefile reads, so `make test PYTEST_ARGS=...` means something."""
    return set(re.findall(r"\$\(([A-Z_]+)\)", (ROOT / "Makefile").read_text()))


def names_in_sources() -> str:
    """The product's own source text, to check that an exported TASKFLEET_* variable is read."""
    return "\n".join(p.read_text() for d in ("taskfleet", "workflows", "activities")
                     for p in (ROOT / d).rglob("*.py"))


def usage_has_options(usage: str, options: list[str]) -> list[str]:
    """The options of a command line that its program's usage text does not name."""
    return [o for o in options
            if not re.search(rf"(?<![\w-]){re.escape(o.split('=', 1)[0])}(?![\w-])", usage)]


def check_git(args: list[str]) -> None:
    """git has no dry run: the subcommand's usage (`-h`,
    in a scratch repository) must name every option."""
    # global options: a path or a setting that need not exist here
    while args and args[0] in ("-C", "-c"):
        args = args[2:]
    words = []
    for word in args:
        if word.startswith("-"):
            break
        words.append(word)
    options = [a for a in args if a.startswith("-")]
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(["git", "init", "-q", scratch], check=True)
        done = subprocess.run(["git", *words, "-h"], cwd=scratch, capture_output=True,
                              text=True, timeout=30)
    usage = done.stdout + done.stderr
    assert done.returncode == 129 and "usage: git" in usage, (
        f"git does not know: git {shlex.join(args)}")
    assert not usage_has_options(usage, options), (
        f"git {shlex.join(words)} has no {usage_has_options(usage, options)}")


def check_docker_compose(args: list[str]) -> None:
    """No Docker engine here: the profile and services must be docker-compose.yml's,
    the flags known ones."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    profiles = {p for service in compose["services"].values() for p in service.get("profiles", [])}
    flags = {"up": {"-d", "--detach", "--build", "--wait"}, "down": {"-v", "--volumes"},
             "ps": set(), "logs": {"-f", "--follow"}, "config": {"--quiet", "-q"}, "build": set()}
    while args[:1] == ["--profile"]:
        assert args[1] in profiles, f"docker-compose.yml has no profile {args[1]!r}"
        args = args[2:]
    assert args and args[0] in flags, f"docker compose subcommand not checked: {args}"
    for word in args[1:]:
        if word.startswith("-"):
            assert word in flags[args[0]], f"docker compose {args[0]}: flag not checked: {word}"
        else:
            assert word in compose["services"], f"docker-compose.yml has no service {word!r}"


@functools.cache
def script_usage(script: str) -> tuple[int, str]:
    """A benchmark's `--help` (its own argparse parser), once per script."""
    done = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    # benchmarks keep stdout for their JSON: help goes to stderr
    return done.returncode, done.stdout + done.stderr


def check_python(args: list[str]) -> None:
    if args[:2] == ["-m", "taskfleet"] or args[:2] == ["-m", "taskfleet.cli"]:
        check(["taskfleet", *args[2:]])
    elif args[:1] == ["worker.py"]:
        worker_parse_args(args[1:])
    elif args[:2] == ["-m", "pytest"]:
        done = subprocess.run([sys.executable, "-m", "pytest", *args[2:], "--collect-only", "-q"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (
            f"pytest refused {shlex.join(args)}: {done.stdout[-500:]}{done.stderr[-500:]}")
    elif args and args[0].startswith("benchmarks/") and args[0].endswith(".py"):
        assert (ROOT / args[0]).is_file(), f"no benchmark {args[0]}"
        code, usage = script_usage(args[0])
        assert code == 0, usage
        options = [a for a in args[1:] if a.startswith("-")]
        assert not usage_has_options(usage, options), (
            f"{args[0]} has no {usage_has_options(usage, options)}")
    else:
        pytest.fail(f"a python command no test checks: python {shlex.join(args)}")


def check(words: list[str]) -> None:
    # `NAME=value command`: its environment
    while words and re.fullmatch(r"[A-Z][A-Z0-9_]*=\S*", words[0]):
        check(["export", words[0]])
        words = words[1:]
    program, args = words[0], words[1:]
    if program.startswith(".venv/bin/"):
        program = program.removeprefix(".venv/bin/")
    if program == "make":
        variables = {a.split("=", 1)[0] for a in args if "=" in a}
        assert variables <= makefile_variables(), words
        assert {a for a in args if "=" not in a} <= makefile_targets(), words
    elif program == "." and args == [".venv/bin/activate"]:
        assert (BIN / "activate").is_file()
    elif program == "export":
        for assignment in args:
            name = assignment.split("=", 1)[0]
            assert name.startswith("TASKFLEET_") and name in names_in_sources(), (
                f"nothing reads {name}")
    elif program == "taskfleet":
        try:
            build_parser().parse_args(args)
        except SystemExit as exit_:
            assert exit_.code == 0 and "--help" in args, (
                f"taskfleet's parser refused: {shlex.join(words)}")
    elif program == "taskfleet-worker" or words[:2] == ["python", "worker.py"]:
        worker_parse_args(args[1:] if program == "python" else args)
    elif program == "python":
        check_python(args)
    elif program == "temporal":
        flags = [a for a in args]
        done = subprocess.run([find_temporal_cli(), *flags, "--help"], capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 0, f"temporal refused {shlex.join(words)}: {done.stderr.strip()}"
    elif program == "git":
        check_git(args)
    elif program == "mkdocs":
        done = subprocess.run([BIN / "mkdocs", *args, "--help"], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, f"mkdocs refused {shlex.join(words)}: {done.stderr.strip()}"
    elif program == "docker" and args[:1] == ["compose"]:
        check_docker_compose(args[1:])
    else:
        pytest.fail(f"the docs run a command no test checks: {shlex.join(words)}")


def test_readme_has_examples_to_check():
    found = commands()
    assert (len(found) >= 20 and any(w[0] == "taskfleet" for w in found)
            and any(w[0] == "temporal" for w in found))
    assert README.index(". .venv/bin/activate") < README.index("taskfleet run "), (
        "activation comes first")


def test_the_docs_have_examples_to_check():
    """Every page is read (the nav and the folder agree),
    and the pages hold commands of every kind checked."""
    nav = (ROOT / "mkdocs.yml").read_text()
    assert ({f"docs/{name}" for name in re.findall(r":\s*([\w/-]+\.md)\s*$", nav, re.M)}
            == set(PAGES) - {"README.md"})
    programs = {words[0] for _, words in all_commands()}
    assert ({"taskfleet", "taskfleet-worker", "temporal", "make", "git", "docker", "python"}
            <= programs)


@pytest.mark.parametrize("page,words", all_commands(),
                         ids=lambda v: v if isinstance(v, str) else shlex.join(v)[:60])
def test_each_shell_command_parses(page: str, words: list[str]):
    check(words)


def test_the_checker_refuses_a_wrong_command():
    with pytest.raises(AssertionError):
        check(["taskfleet", "run", "board.md"])  # --repo is required
    with pytest.raises(AssertionError):
        check(["temporal", "workflow", "list", "--no-such-flag"])
    with pytest.raises(AssertionError):
        check(["make", "no-such-target"])
    with pytest.raises(AssertionError):
        check(["make", "test", "NO_SUCH_VARIABLE=1"])
    with pytest.raises(AssertionError):
        check(["git", "worktree", "list", "--no-such-flag"])
    with pytest.raises(AssertionError):
        check(["git", "no-such-command"])
    with pytest.raises(AssertionError):
        check(["mkdocs", "build", "--no-such-flag"])
    with pytest.raises(AssertionError):
        check(["docker", "compose", "--profile", "no-such-profile", "up", "-d"])
    with pytest.raises(AssertionError):
        check(["python", "benchmarks/dispatch.py", "--no-such-flag"])
    with pytest.raises(AssertionError):
        check(["export", "TASKFLEET_NO_SUCH_SETTING=1"])


def test_commands_that_need_no_server_run_verbatim(tmp_path: Path):
    """Run as printed, from a folder outside the project, with the activated environment's PATH."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    ran = 0
    distinct = {shlex.join(words): words for _, words in all_commands()}.values()
    for words in distinct:
        if words[0] == "taskfleet" and (words[1:] == ["--help"] or words[1:3] == ["git", "id"]):
            done = subprocess.run(words, cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=60)
            assert done.returncode == 0 and done.stdout.strip(), (words, done.stderr)
            ran += 1
    assert ran >= 2


@pytest.mark.parametrize("page,source", page_blocks("python"),
                         ids=lambda v: v if len(v) < 40 else "block")
def test_python_blocks_compile(page: str, source: str):
    compile(source, f"{page} python block", "exec")
    assert not re.search(r"^await ", source, re.M), "no top-level await"


@pytest.mark.parametrize("page,source", page_blocks("toml"),
                         ids=lambda v: v if len(v) < 40 else "block")
def test_toml_blocks_are_boards(page: str, source: str):
    data = tomllib.loads(source)
    assert set(data) <= BOARD_KEYS, f"{page}: not board keys: {sorted(set(data) - BOARD_KEYS)}"
    if "tasks" in data:
        assert parse_toml_board(source, source=page).tasks


def test_readme_links_point_to_files():
    links = [link for link in re.findall(r"\]\(([^)\s]+)\)", README)
             if not re.match(r"[a-z]+:|#", link)]
    assert links, "the README links to the docs pages"
    missing = [link for link in links if not (ROOT / link.split("#", 1)[0]).exists()]
    assert not missing, missing


def test_readme_fits_on_two_screens():
    assert len(README.splitlines()) <= 250


# The marks of a work log. Written with character classes (`[/]`, `[ ]`), and its samples below
# assembled from parts, so that this file's own text holds none of the marks it looks for.
WORK_LOG = re.compile(
    r"\b(?:issues?|stops?) #?\d+\b|\bnotes[/]|closing[ ]note|\bh\d+\b|\bhelpers?\b|\bcontract C\d\b|\breview[ ]item",  # noqa: E501 (TEST_DATA: this text whole)
    re.I,
)
SAMPLE_ITEM, SAMPLE_NOTE, SAMPLE_PERSON = ("as issue " + "14 puts it", "see notes" + "/h" + "7.md",
                                           "as h" + "12 said")


# In code, "helper" is an ordinary word for a function or a fixture; every other mark of a work item
# means the same in code as in prose.
WORK_LOG_IN_CODE = re.compile(WORK_LOG.pattern.replace(r"|\bhelpers?\b", ""), re.I)
# Folders and top-level files whose text is the product's (the recorded histories are data, not
# text).
PRODUCT_DIRS = ("taskfleet", "workflows", "activities", "tests", "benchmarks", "examples", "docker")
PRODUCT_FILES = ("worker.py", "Makefile", "pyproject.toml", "mkdocs.yml", "Dockerfile",
                 "docker-compose.yml")
PRODUCT_SUFFIXES = (".py", ".md", ".toml", ".j2", ".txt", ".sh", ".yml", ".yaml")
# Strings that are test data, not prose: the patterns above and the samples that prove they match,
# and a file a test writes into a scratch repository. Each must still be where it is named.
SCRATCH_FILE = 'f"notes' + '/{i}.txt"'
TEST_DATA = {
    "tests/test_readme.py": (WORK_LOG.pattern,),
    "tests/test_merge_queue.py": (SCRATCH_FILE,),
}


def product_files() -> dict[str, str]:
    """Every text file of the product: README, docs, code, tests, benchmarks, examples,
    packaging."""
    paths = [ROOT / name for name in PRODUCT_FILES] + [
        p for d in PRODUCT_DIRS for p in (ROOT / d).rglob("*")
        if p.is_file() and p.suffix in PRODUCT_SUFFIXES
            and "histories" not in p.relative_to(ROOT).parts
    ]
    return dict(PAGES) | {str(p.relative_to(ROOT)): p.read_text() for p in paths if p.is_file()}


def test_the_product_names_no_work_items():
    """The product speaks of itself: README, docs, examples, and the comments, docstrings and
    messages of the code say why it is as it is, never which work item or build note made it."""
    found = []
    for name, text in product_files().items():
        for data in TEST_DATA.get(name, ()):
            assert data in text, (
                f"{name} no longer holds the test data {data!r}: drop it from TEST_DATA")
            text = text.replace(data, "")
        pattern = WORK_LOG_IN_CODE if name.endswith((".py", ".j2")) else WORK_LOG
        found += [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
                  for m in pattern.finditer(text)]
    assert not found, found
    assert WORK_LOG.search(SAMPLE_ITEM) and WORK_LOG.search(SAMPLE_NOTE)
    assert WORK_LOG_IN_CODE.search(SAMPLE_PERSON) and not WORK_LOG_IN_CODE.search("a helper")
