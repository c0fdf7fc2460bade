"""The merge queue against one at a time (merge one, verify, push, next), measured in the same run.

Three cases, each against the same workflow set to `max_batch` 1 and `parallel` 1 (one at a time):

- `legacy`: 50 entries (each adds a module that calls `lib.helper()`), a verify of about 1 s, k
  culprits in {0, 1, 3}: a culprit deletes `lib.helper`, so it passes alone and fails merged with
  any other entry. Culprits spread through the queue, never first.
- `ci` (realistic CI): N entries (40), a verify that takes S seconds (2) and mostly waits, C
  culprits (3, at seeded places: each breaks the suite wherever it lands), F percent (10) of runs
  red for no reason (a flaky test, drawn per run from the seed), `max_batch` 8 and `parallel` 4,
  over several seeds; then the same queues with taskfleet's risk signals on some entries (risk-aware
  batching), and a case with no culprit and no flake. Every run checks that no innocent entry was
  rejected, no culprit landed, main only moved forward (a hook refuses anything else) and every
  commit main ever pointed to passes the verify.
- `repo`: a real repository (more-itertools 11.2.1 from PyPI, unpacked at run time; skipped with a
  note when pip cannot fetch it), its own unittest suite (929 tests with its doctests, CPU-bound:
  parallel runs share the cores) as the verify; 6 docstring edits, 1 change that breaks a doctest.

JSON on stdout: per case the walls, verify runs, pushes and the ratio to one at a time, the floors
and whether they hold.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from common import emit, run, temporal_worker

from taskfleet.clients.merge_queue import MergeQueueClient
from taskfleet.core.models.merge_queue import MergeQueueConfig, QueueEntry
from taskfleet.testing import git, make_git_remote

TASK_QUEUE = "bench-queue"
CHECK = """import importlib, os, pathlib, random, sys, time
time.sleep(float(os.environ.get("BENCH_SLEEP", "{sleep}")))
run = os.environ.get("TASKFLEET_QUEUE_BATCH", "")
if random.Random("{seed}/" + run).random() < float(os.environ.get("BENCH_FLAKE", "{flake}")):
    sys.exit("FAIL: test_upload_retries (flaky: a timeout that has nothing to do with the change)")
sys.path.insert(0, ".")
for path in sorted(pathlib.Path("calls").glob("m*.py")):
    importlib.import_module("calls." + path.stem).run()
"""
LIB = "def helper():\n    return 1\n"
CULPRIT_LIB = "def renamed_helper():\n    return 1\n"
CALLER = "import lib\n\n\ndef run():\n    assert lib.helper() == 1\n"
BREAKER = "def run():\n    raise AssertionError('entry {i} breaks the suite')\n"
# The target's hook: only fast-forwards of main, each logged (every commit main ever points to).
FORWARD_ONLY = """while read old new ref; do
  if [ "$ref" = refs/heads/main ] && ! git merge-base --is-ancestor "$old" "$new"; then
    echo "$new refused" >> "{log}"; echo "not a fast-forward" >&2; exit 1
  fi
  echo "$new" >> "{log}"
done
echo push >> "{pushes}"
"""
REPO_PACKAGE, REPO_VERSION = "more-itertools", "11.2.1"
SINGLE = dict(max_batch=1, parallel=1)  # one at a time: merge one, verify, push, next
DOC_EDITS = ("first", "last", "peekable", "collapse", "windowed", "spy")


def culprit_positions(n: int, k: int) -> list[int]:
    """k positions spread through n entries, never the first (a culprit first, on a base nobody
    calls `helper` on, would pass: nothing it clashes with has landed yet)."""
    return [(i + 1) * n // (k + 1) for i in range(k)]


def seed_repo(root: Path, files: dict[str, str]):
    seed = root / "seed-files"
    for name, text in files.items():
        (seed / name).parent.mkdir(parents=True, exist_ok=True)
        (seed / name).write_text(text)
    fx = make_git_remote(root / "git", seed_from=seed)
    log = fx.remote.parent / "tips.log"
    fx.install_hook("pre-receive", FORWARD_ONLY.format(log=log, pushes=fx.push_log))
    return fx


def tips(fx) -> tuple[list[str], int]:
    """Every commit main was moved to, and the updates the hook refused."""
    log = fx.remote.parent / "tips.log"
    lines = log.read_text().splitlines() if log.exists() else []
    refused = sum(1 for line in lines if line.endswith("refused"))
    return [line for line in lines if " " not in line], refused


def passes(fx, root: Path, commit: str, command: str, env: dict[str, str]) -> bool:
    out = root / f"check-{commit[:12]}"
    git(fx.remote, "worktree", "add", "-q", "--detach", str(out), commit)
    try:
        ran = subprocess.run(command, shell=True, cwd=out, capture_output=True,
                             env={**os.environ, **env}, timeout=900)
        return ran.returncode == 0
    finally:
        git(fx.remote, "worktree", "remove", "--force", str(out))


async def one_queue(client, fx, entries: list[QueueEntry], culprits: set[str], command: str,
                    root: Path, check_env: dict[str, str] | None, **config) -> dict:
    """Send every entry, flush, wait until each is answered: what it cost, whether main stayed
    green (with `check_env`, every tip main was moved to is verified again, flakes off)."""
    q = MergeQueueClient(client, MergeQueueConfig(repo=str(fx.clone), target="main", verify=command,
                                                  max_wait_seconds=3600, **config), TASK_QUEUE)
    started = time.perf_counter()
    for entry in entries:
        await q.enqueue(entry)
    await q.flush()
    while True:
        stats = await q.stats()
        if stats.landed + stats.rejected + stats.conflicts >= len(entries):
            break
        await asyncio.sleep(0.05)  # polling the queue's counters: what a caller waits
    wall = time.perf_counter() - started
    status = await q.status()
    head = fx.remote_ref("main")
    landed = {e.id for e in entries if subprocess.run(
        ["git", "merge-base", "--is-ancestor", e.expect_commit, head], cwd=fx.remote,
        capture_output=True).returncode == 0}
    rejected = {o.entry_id for o in status.recent if o.status == "rejected"}
    moved_to, refused = tips(fx)
    checked = check_env is not None
    green = [passes(fx, root, tip, command, check_env) for tip in moved_to] if checked else []
    known = len(status.recent) >= len(entries)
    return {
        "wall_seconds": round(wall, 2), "verify_runs": stats.verify_runs,
        "confirm_runs": stats.confirm_runs, "cancelled_runs": stats.cancelled_runs,
        "flaky_runs": stats.flaky_runs, "pushes": stats.pushes,
        "pushes_counted_by_hook": fx.pushes(),
        "bisection_steps": stats.bisection_steps, "rebuilds": stats.rebuilds,
        "landed": stats.landed, "rejected": stats.rejected, "conflicts": stats.conflicts,
        "final_window": stats.window, "verify_seconds": round(stats.verify_seconds, 2),
        "innocents_rejected": sorted(rejected - culprits) if known else None,
        "culprits_landed": sorted(landed & culprits),
        "all_non_culprits_landed": landed == {e.id for e in entries} - culprits,
        "main_moved_only_forward": refused == 0,
        "every_tip_passes_verify": all(green) if checked else None,
        "tips_checked": len(green),
        "reasons": [o.reason[:200] for o in status.recent if o.status == "rejected"][:3],
        "what_the_output_names": [
            line.strip()[:160] for o in status.recent if o.status == "rejected"
            for line in o.output_tail.splitlines() if re.search(r"FAIL|Failed example|Error", line)
        ][:4],
    }


def correct(r: dict) -> bool:
    return (r["innocents_rejected"] == [] and not r["culprits_landed"]
            and r["all_non_culprits_landed"] and r["main_moved_only_forward"]
            and r["every_tip_passes_verify"] is not False)


# --- legacy: 50 entries, a culprit that clashes with what landed before it -------------------


async def legacy(client, root: Path, n: int, b: int, sleep: float, ks: list[int]) -> dict:
    command = "python3 check.py"
    out = {}
    for k in ks:
        case = {}
        for name, config in (("batched", dict(max_batch=b)), ("one_at_a_time", SINGLE)):
            where = root / f"legacy-k{k}-{name}"
            check = CHECK.format(sleep=sleep, seed=0, flake=0)
            fx = seed_repo(where, {"lib.py": LIB, "check.py": check, "calls/__init__.py": ""})
            at = set(culprit_positions(n, k))
            entries = []
            for i in range(n):
                branch = f"{'culprit' if i in at else 'entry'}/{i:02d}"
                files = {"lib.py": CULPRIT_LIB} if i in at else {f"calls/m{i:02d}.py": CALLER}
                entries.append(QueueEntry(branch=branch, id=f"e{i:02d}",
                                          expect_commit=fx.branch_with(branch, files)))
            culprits = {f"e{i:02d}" for i in at}
            case[name] = await one_queue(client, fx, entries, culprits, command, where,
                                         {"BENCH_SLEEP": "0"}, **config)
        batched, single = case["batched"], case["one_at_a_time"]
        ratio = round(batched["wall_seconds"] / single["wall_seconds"], 3)
        case["wall_ratio_batched_over_one_at_a_time"] = ratio
        case["correct"] = correct(batched) and correct(single)
        if k == 0:
            case["floor_verify_runs"], case["floor_wall_ratio"] = math.ceil(n / b) + 1, 0.25
        elif k == 1:
            case["floor_verify_runs"] = math.ceil(n / b) + 2 * math.ceil(math.log2(b)) + 2
            case["floor_wall_ratio"] = round(1 / 3, 3)
        if "floor_verify_runs" in case:
            case["floors_met"] = (case["correct"]
                                  and batched["verify_runs"] <= case["floor_verify_runs"]
                                  and ratio <= case["floor_wall_ratio"])
        out[f"k={k}"] = case
    return out


# --- ci: a realistic suite (mostly waiting), culprits anywhere, flaky runs ------------------


def ci_entries(fx, n: int, culprits: set[int], risky: set[int]) -> list[QueueEntry]:
    entries = []
    for i in range(n):
        branch = f"{'culprit' if i in culprits else 'entry'}/{i:02d}"
        files = {f"calls/m{i:02d}.py": BREAKER.format(i=i) if i in culprits else CALLER}
        entries.append(QueueEntry(branch=branch, id=f"e{i:02d}", risk=int(i in risky),
                                  expect_commit=fx.branch_with(branch, files), files=list(files)))
    return entries


async def ci_seed(client, root: Path, seed: int, args, name: str) -> dict:
    """One queue (`speculative`, `risk_aware` or `one_at_a_time`) on the seed's entries."""
    rnd = random.Random(seed)
    at = set(rnd.sample(range(args.entries), args.culprits))
    # What taskfleet knows: a revise or fix round on 2 of 3 culprits and on 1 in 10 others.
    odds = [2 / 3 if i in at else 0.1 for i in range(args.entries)]
    risky = {i for i, p in enumerate(odds) if rnd.random() < p} if name == "risk_aware" else set()
    where = root / f"ci-seed{seed}-{name}"
    check = CHECK.format(sleep=args.verify_seconds, seed=seed, flake=args.flake_percent / 100)
    fx = seed_repo(where, {"lib.py": LIB, "calls/__init__.py": "", "check.py": check})
    entries = ci_entries(fx, args.entries, at, risky)
    config = SINGLE if name == "one_at_a_time" else dict(max_batch=args.max_batch,
                                                          parallel=args.parallel)
    return await one_queue(client, fx, entries, {f"e{i:02d}" for i in at}, "python3 check.py",
                           where, {"BENCH_SLEEP": "0", "BENCH_FLAKE": "0"},
                           flake_retries=args.flake_retries, **config)


def ratio(case: dict, key: str) -> float:
    return round(case[key]["wall_seconds"] / case["one_at_a_time"]["wall_seconds"], 3)


async def ci(client, root: Path, args) -> dict:
    out: dict = {key: getattr(args, key) for key in (
        "entries", "verify_seconds", "culprits", "flake_percent", "max_batch", "parallel",
        "flake_retries")}
    out["seeds"] = {}
    queues = ("speculative", "one_at_a_time") + (() if args.quick else ("risk_aware",))
    for seed in range(1, args.seeds + 1):
        case = {name: await ci_seed(client, root, seed, args, name) for name in queues}
        for key in ("speculative", "risk_aware"):
            if key in case:
                case[f"wall_ratio_{key}"] = ratio(case, key)
        out["seeds"][str(seed)] = case
    cases = list(out["seeds"].values())
    one = sum(c["one_at_a_time"]["wall_seconds"] for c in cases)
    for key in ("speculative", "risk_aware", "one_at_a_time"):
        runs = [c[key] for c in cases if key in c]
        if not runs:
            continue
        if key != "one_at_a_time":
            walls = sum(r["wall_seconds"] for r in runs)
            out[f"wall_ratio_{key}_over_seeds"] = round(walls / one, 3)
            out[f"worst_seed_ratio_{key}"] = max(c[f"wall_ratio_{key}"] for c in cases)
        out[f"{key}_verify_runs"] = sum(r["verify_runs"] for r in runs)
        out[f"{key}_cancelled_runs"] = sum(r["cancelled_runs"] for r in runs)
        out[f"{key}_innocents_rejected"] = sum(len(r["innocents_rejected"] or []) for r in runs)
        out[f"{key}_culprits_landed"] = sum(len(r["culprits_landed"]) for r in runs)
        out[f"{key}_all_correct"] = all(correct(r) for r in runs)
    out["floor_wall_ratio"] = 0.30
    out["floors_met"] = (out["speculative_all_correct"]
                         and out["wall_ratio_speculative_over_seeds"] <= 0.30)
    if args.quick:
        out["no_culprit_no_flake"] = {"skipped": "quick mode"}
        return out
    # No culprit and no flake: the floor is 0.12 of one at a time.
    quiet = argparse.Namespace(**{**vars(args), "culprits": 0, "flake_percent": 0})
    calm = {name: await ci_seed(client, root, 0, quiet, name)
            for name in ("speculative", "one_at_a_time")}
    calm["wall_ratio"] = ratio(calm, "speculative")
    calm["floor_wall_ratio"] = 0.12
    calm["floors_met"] = correct(calm["speculative"]) and calm["wall_ratio"] <= 0.12
    out["no_culprit_no_flake"] = calm
    return out


# --- repo: a real repository's own suite -----------------------------------------------------


def fetch_repo(root: Path) -> Path | None:
    """more-itertools' source from PyPI (pip's download), unpacked; None when pip cannot get it."""
    wanted = f"{REPO_PACKAGE}=={REPO_VERSION}"
    got = subprocess.run([sys.executable, "-m", "pip", "download", wanted, "--no-binary", ":all:",
                          "--no-deps", "-q", "-d", str(root / "sdist")],
                         capture_output=True, timeout=300)
    archives = list((root / "sdist").glob("*.tar.gz")) if got.returncode == 0 else []
    if not archives:
        return None
    with tarfile.open(archives[0]) as archive:
        archive.extractall(root / "src", filter="data")
    return next((root / "src").iterdir())


def doc_edit(text: str, name: str, note: str) -> str:
    """A line of prose added to the docstring of `name` (its doctests untouched)."""
    match = re.search(rf'^(def|class) {name}\b.*?"""[^\n]*\n', text, flags=re.S | re.M)
    return text[:match.end()] + f"    {note}\n" + text[match.end():]


CHUNKED = ">>> list(chunked([1, 2, 3, 4, 5, 6], 3))\n        [[1, 2, 3], [4, 5, 6]]"
BROKEN = ">>> list(chunked([1, 2, 3, 4, 5, 6], 3))\n        [[1, 2, 3], [4, 5, 6, 7]]"


async def real_repo(client, root: Path, culprit_at: int, parallel: int) -> dict:
    source = fetch_repo(root)
    if source is None:
        return {"skipped": f"pip could not download {REPO_PACKAGE}=={REPO_VERSION} (no index?)"}
    more = (source / "more_itertools" / "more.py").read_text()
    kinds = (".py", ".cfg", ".toml", ".ini", ".rst", ".txt", ".in")
    files = {str(p.relative_to(source)): p.read_text() for p in source.rglob("*")
             if p.is_file() and p.suffix in kinds}
    command = "python3 -m unittest -q"
    out: dict = {"package": f"{REPO_PACKAGE}=={REPO_VERSION}", "verify": command, "changes": 7,
                 "culprit_position": culprit_at, "parallel": parallel, "cores": os.cpu_count()}
    for name, config in (("speculative", dict(max_batch=8, parallel=parallel)),
                         ("one_at_a_time", SINGLE)):
        where = root / f"repo-{name}"
        fx = seed_repo(where, files)
        entries, culprits, edits = [], set(), iter(DOC_EDITS)
        for i in range(7):
            if i == culprit_at:  # an expected doctest output changed: the suite names the example
                text = more.replace(CHUNKED, BROKEN)
                culprits.add(f"c{i}")
            else:
                text = doc_edit(more, next(edits), f"(Documentation note {i}.)")
            branch = f"change/{i}"
            commit = fx.branch_with(branch, {"more_itertools/more.py": text})
            entries.append(QueueEntry(branch=branch, id=f"c{i}", expect_commit=commit))
        checked = {} if name == "speculative" else None  # each tip it made: the suite again
        out[name] = await one_queue(client, fx, entries, culprits, command, where, checked,
                                    heartbeat_timeout_seconds=5, **config)
    out["wall_ratio"] = ratio(out, "speculative")
    out["floor_wall_ratio"] = 0.7
    spec = out["speculative"]
    out["culprit_reason"] = spec["reasons"][:1] + spec["what_the_output_names"]
    out["floors_met"] = correct(spec) and out["wall_ratio"] <= 0.7
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    arg = parser.add_argument
    arg("--mode", choices=("all", "legacy", "ci", "repo"), default="all")
    arg("--entries", type=int, help="legacy: 50; ci: 40")
    arg("--max-batch", type=int, default=8, help="the queue's max_batch")
    arg("--parallel", type=int, default=4, help="verify runs at once (ci, repo)")
    arg("--verify-seconds", type=float, help="legacy: sleep in the verify (0.95); ci: 2")
    arg("--culprits", type=int, action="append", help="legacy: k (repeatable; 0, 1, 3); ci: 3")
    arg("--flake-percent", type=float, default=10.0, help="ci: verify runs red for no reason")
    arg("--flake-retries", type=int, default=1, help="ci: the queue's flake_retries")
    arg("--seeds", type=int, default=5, help="ci: seeds (culprit places, flaky runs)")
    arg("--repo-culprit", type=int, default=3, help="repo: the culprit's place among the 7")
    arg("--quick", action="store_true", help="seconds: small legacy and ci cases, no repo")
    args = parser.parse_args()
    figures: dict = {"quick": args.quick, "mode": args.mode, "machine": f"{os.cpu_count()} cores",
                     "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async with temporal_worker(TASK_QUEUE, root / "state") as client:
            # Unmeasured: the first queue pays one-time costs (imports, the server's caches).
            warm = seed_repo(root / "warm-up", {"README.md": "warm\n"})
            firsts = [QueueEntry(branch=b, expect_commit=c, id=b)
                      for b, c in warm.many_branches("w", 4).items()]
            await one_queue(client, warm, firsts, set(), "true", root, None)
            if args.mode in ("all", "legacy"):
                n, sleep = args.entries or 50, args.verify_seconds or 0.95
                ks, b = args.culprits or [0, 1, 3], args.max_batch
                if args.quick:
                    n, sleep, ks, b = 6, 0.1, [1], 3
                figures.update(await legacy(client, root, n, b, sleep, ks))
            if args.mode in ("all", "ci"):
                ci_args = argparse.Namespace(**vars(args))
                ci_args.entries = args.entries or 40
                ci_args.verify_seconds = args.verify_seconds or 2.0
                ci_args.culprits = (args.culprits or [3])[0]
                if args.quick:
                    ci_args.entries, ci_args.verify_seconds, ci_args.culprits = 8, 0.2, 1
                    ci_args.seeds, ci_args.max_batch = 1, 4
                figures["ci"] = await ci(client, root, ci_args)
            if args.mode in ("all", "repo"):
                figures["real_repository"] = (
                    {"skipped": "quick mode"} if args.quick
                    else await real_repo(client, root, args.repo_culprit, args.parallel))
    figures["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    emit(figures)


if __name__ == "__main__":
    run(main)
