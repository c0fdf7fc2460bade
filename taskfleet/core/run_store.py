"""The run store: every task's outcome outside workflow history, readable by any worker and the CLI.
An append-only chain of commits in the clone under one ref per run, a chunk of `outcomes.jsonl`
per commit: appends cost the same at any length, racing writers re-parent on a lost
compare-and-swap (nothing lost), and readers walk one chunk at a time."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from taskfleet.core.git_objects import (
    GitStoreError,
    compare_and_swap,
    git,
    object_reader,
    resolve,
    write_blob,
    write_commit,
    write_tree,
)
from taskfleet.core.store_refs import run_ref

__all__ = ["RunStoreError", "append_outcomes", "iter_outcomes", "read_outcomes", "run_ref"]

CHUNK_FILE = "outcomes.jsonl"
BATCH_SUBJECT = "taskfleet outcomes "
RECENT_BATCHES = 64  # how far back an append looks for its own batch id (a retried append)
APPEND_ATTEMPTS = 100


class RunStoreError(RuntimeError):
    """The run store cannot be written or read; one clear line."""


def _recent_batches(repo: str | Path, tip: str) -> set[str]:
    out = git(repo, "log", f"-{RECENT_BATCHES}", "--first-parent", "--format=%s", tip).decode()
    return {line[len(BATCH_SUBJECT):]
            for line in out.splitlines() if line.startswith(BATCH_SUBJECT)}


def append_outcomes(repo: str | Path, ref: str, batch_id: str,
                    outcomes: Iterable[dict[str, Any]]) -> tuple[str, int, bool]:
    """Append one chunk, re-parented until its compare-and-swap wins; (commit, outcomes recorded,
    already recorded by an earlier attempt)."""
    lines = [json.dumps(o, separators=(",", ":"), ensure_ascii=False) + "\n" for o in outcomes]
    try:
        tree = write_tree(repo, [(CHUNK_FILE, write_blob(repo, "".join(lines).encode()))])
        for attempt in range(APPEND_ATTEMPTS):
            tip = resolve(repo, ref)
            if tip and batch_id in _recent_batches(repo, tip):
                return tip, len(lines), True
            commit = write_commit(repo, tree, tip,
                                  f"{BATCH_SUBJECT}{batch_id}\n\n{len(lines)} outcome(s)")
            if compare_and_swap(repo, ref, commit, tip):
                return commit, len(lines), False
            time.sleep(random.uniform(0.002, 0.02) * min(attempt + 1, 10))
    except GitStoreError as err:
        raise RunStoreError(f"cannot record outcomes in {repo}: {err}") from None
    raise RunStoreError(
        f"cannot record outcomes in {repo}: {ref} kept moving ({APPEND_ATTEMPTS} attempts)")


def iter_outcomes(repo: str | Path, ref: str) -> Iterator[dict[str, Any]]:
    """Every outcome of a run, oldest chunk first, one chunk in memory at a time (no ref yet:
    nothing; a missing clone: RunStoreError)."""
    try:
        tip = resolve(repo, ref)
        if tip is None:
            # a missing clone says so; a missing ref is no outcomes
            git(repo, "rev-parse", "--git-dir")
            return
        chain = git(repo, "rev-list", "--first-parent", "--reverse", tip).decode().split()
    except GitStoreError as err:
        raise RunStoreError(f"cannot read outcomes from {repo}: {err}") from None
    with object_reader(repo) as objects:
        for commit in chain:
            data = objects.read(f"{commit}:{CHUNK_FILE}")
            if data is None:
                raise RunStoreError(f"{ref} in {repo}: chunk {commit[:12]} has no {CHUNK_FILE}")
            for line in data.splitlines():
                if line.strip():
                    yield json.loads(line)


def read_outcomes(repo: str | Path, ref: str, max_outcomes: int,
                  max_bytes: int) -> tuple[list[dict[str, Any]], bool]:
    """All outcomes of a small run, or ([], False) as soon as they exceed either limit."""
    outcomes: list[dict[str, Any]] = []
    size = 0
    for outcome in iter_outcomes(repo, ref):
        size += len(json.dumps(outcome))
        if len(outcomes) >= max_outcomes or size > max_bytes:
            return [], False
        outcomes.append(outcome)
    return outcomes, True
