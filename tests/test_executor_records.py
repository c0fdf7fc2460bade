"""Executor records: a worker's journal names exactly the executors still running when it died,
and the next worker kills those (found by their token in /proc) and nothing else. Real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from taskfleet.activities.processes.executor_records import (
    JOURNAL_ROTATE_BYTES,
    TOKEN_VARIABLE,
    ExecutorRecords,
)


def sleeper(token: str) -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"], env={**os.environ, TOKEN_VARIABLE: token},
                            start_new_session=True)


def test_a_dead_workers_running_executors_are_killed_and_finished_ones_left_alone(tmp_path: Path):
    root = tmp_path / "executors"
    # A "dead worker": a process that wrote its journal and exited.
    script = f"""
import sys
sys.path[:0] = {sys.path!r}
from pathlib import Path
from taskfleet.activities.processes.executor_records import ExecutorRecords
records = ExecutorRecords(Path({str(root)!r}))
tokens = [records.new_token() for _ in range(3)]
for i, token in enumerate(tokens):
    records.record(token, 0)
records.forget(tokens[1])
print(" ".join(tokens))
"""
    tokens = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True).stdout.split()
    running, finished = sleeper(tokens[0]), sleeper(tokens[1])
    try:
        journal = next(root.glob("*.journal"))
        assert journal.name.startswith(tokens[0].split("-")[0] + "-")
        killed = ExecutorRecords(root).reap_dead()
        assert killed == 1
        assert running.wait(timeout=10) == -9
        assert finished.poll() is None  # its record said it had ended: not ours to kill
        assert list(root.iterdir()) == []
    finally:
        for proc in (running, finished):
            proc.kill()
            proc.wait()


def test_the_journal_is_rewritten_with_only_the_running_executors_when_it_grows(tmp_path: Path):
    records = ExecutorRecords(tmp_path)
    keep = records.new_token()
    records.record(keep, 4242)
    for _ in range(JOURNAL_ROTATE_BYTES // 40 + 10):
        token = records.new_token()
        records.record(token, 1)
        records.forget(token)
    journals = list(tmp_path.glob("*.journal"))
    assert len(journals) == 1 and journals[0].stat().st_size < JOURNAL_ROTATE_BYTES + 100
    assert f"+ {keep} 4242" in journals[0].read_text()
