"""Layers you can see: imports only point down (ground <- workflows/activities <- plugin, clients,
CLI).

Parsed with `ast` from the source tree, so a lazy import inside a function counts as much as one at
the top of a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Where each installed package lives in the checkout (pyproject's package-dir mapping).
SOURCES = {"taskfleet.workflows": ROOT / "workflows", "taskfleet.activities": ROOT / "activities",
           "taskfleet": ROOT / "taskfleet"}
TOP = ("taskfleet.clients", "taskfleet.cli", "taskfleet.plugin", "taskfleet.coordination",
       "taskfleet.worker", "taskfleet.devserver")


def modules_under(package: str) -> dict[str, Path]:
    root = max((p for p in SOURCES if package == p or package.startswith(p + ".")), key=len)
    folder = SOURCES[root].joinpath(*package.removeprefix(root).split(".")[1:])
    assert folder.is_dir(), folder
    return {f"{package}:{path.relative_to(folder)}": path for path in sorted(folder.rglob("*.py"))}


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def offending(package: str, forbidden: tuple[str, ...]) -> list[str]:
    found = []
    for where, path in modules_under(package).items():
        for name in sorted(imports_of(path)):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                found.append(f"{where} imports {name}")
    return found


def test_the_ground_imports_nothing_above_it():
    assert modules_under("taskfleet.core"), "taskfleet/core not found"
    assert offending("taskfleet.core", ("taskfleet.workflows", "taskfleet.activities", *TOP)) == []


def test_workflows_and_activities_never_import_the_top():
    assert offending("taskfleet.workflows", TOP) == []
    assert offending("taskfleet.activities", TOP) == []


def test_activities_never_import_workflows():
    assert offending("taskfleet.activities", ("taskfleet.workflows",)) == []


def test_the_activity_groups_point_one_way():
    """`git` builds on `processes` and `pods`; `processes`, `pods` and `model_io` stand alone, so a
    change to how commands run or how pods coordinate never has to read the git code."""
    groups = ("git", "processes", "pods", "model_io")
    found = {g for g in groups if (SOURCES["taskfleet.activities"] / g / "__init__.py").is_file()}
    assert found == set(groups), found
    alone = {"processes": groups, "pods": groups, "model_io": groups, "git": ("model_io",)}
    for group, forbidden in alone.items():
        others = tuple(f"taskfleet.activities.{g}" for g in forbidden if g != group)
        assert offending(f"taskfleet.activities.{group}", others) == [], group
    # Worker memory is read by the groups, never the reverse.
    assert offending("taskfleet.activities.services",
                     tuple(f"taskfleet.activities.{g}" for g in groups)) == []


def test_no_bare_top_level_imports_of_our_folders():
    """Inside the package everything is `taskfleet.*`: a bare `workflows`/`activities` import would
    collide with a user's own modules of that name."""
    bare = ("workflows", "activities", "worker", "examples")
    for package in ("taskfleet", "taskfleet.workflows", "taskfleet.activities"):
        assert offending(package, bare) == [], package


def test_the_checker_sees_a_violation(tmp_path: Path):
    """The parser would catch a lazy import inside a function (so the tests above can fail)."""
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from taskfleet.cli.main import main\n    import taskfleet.plugin\n")
    assert {"taskfleet.cli.main", "taskfleet.plugin"} <= imports_of(module)


def test_no_worker_code_imports_the_testing_parts():
    """`taskfleet.testing` (git fixtures, the Anthropic stand-in, the scale harness) ships in the
    wheel for tests, benchmarks and the offline demo, but the code a worker runs never loads it."""
    runtime = ("taskfleet.core", "taskfleet.workflows", "taskfleet.activities", "taskfleet.clients",
               "taskfleet.devserver")
    for package in runtime:
        assert offending(package, ("taskfleet.testing",)) == [], package
    for module in ("plugin.py", "worker.py", "coordination.py", "versioning.py",
                   "sample_remote.py"):
        assert not any(n.startswith("taskfleet.testing")
                       for n in imports_of(SOURCES["taskfleet"] / module)), module


def test_starting_a_worker_loads_nothing_of_the_testing_parts():
    import subprocess
    import sys

    code = ("import sys, taskfleet.worker, taskfleet.plugin, taskfleet.cli.main; "
            "print(sorted(m for m in sys.modules if m.startswith('taskfleet.testing')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
