"""Benchmarks stay alive: each script in benchmarks/ runs with `--quick` and prints its JSON.

Only that they run and print a JSON object is checked here; their figures are benchmarks, never
asserted (README's table comes from full runs).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# runs every benchmark script in quick mode
pytestmark = [pytest.mark.slow, pytest.mark.heavy(seconds=80)]
# A liveness guard, not a speed check: a quick benchmark starts its own dev server and workers and
# shares two cores with the rest of the suite, where it runs several times slower than alone.
GUARD_SECONDS = 420

BENCHMARKS = ROOT / "benchmarks"
# imported or started by the benchmarks, not benchmarks themselves
HELPERS = {"common.py", "send_ops.py"}
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name not in HELPERS)


def last_json_object(text: str) -> dict:
    """The last top-level JSON object in `text` (a benchmark's stdout holds its JSON alone, but a
    stray line before it must not hide it)."""
    starts = [i for i, line in enumerate(text.splitlines()) if line.startswith("{")]
    assert starts, f"no JSON object in the output:\n{text[-2000:]}"
    return json.loads("\n".join(text.splitlines()[starts[-1]:]))


def test_every_benchmark_is_listed_in_make_bench_quick():
    makefile = (ROOT / "Makefile").read_text()
    assert SCRIPTS, "no benchmarks found"
    for name in SCRIPTS:
        assert f"benchmarks/{name} --quick" in makefile, name


@pytest.mark.timeout(GUARD_SECONDS + 30)
@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_runs_quick_and_prints_json(script: str):
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick"],
        cwd=ROOT, capture_output=True, text=True, timeout=GUARD_SECONDS, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = last_json_object(proc.stdout)
    assert isinstance(figures, dict) and figures
    assert figures.get("quick") is True, f"{script} did not take --quick"
    if script == "dispatch.py":
        assert all(any("ratio" in key for key in case) for case in figures["compare"].values())
        # the worktree floor is this ratio: quick mode measures a pair too, so it prints
        assert set(figures["ratio_with_over_without_worktrees"]) == {
            "9x0.2s_c9_with_worktrees", "9x0.2s_c9_with_worktrees_best_possible"}
        assert figures["git_work_floor"]["least_added_ms"] > 0
