"""Scratch folders of worktree-less tasks: reused when left empty, removed when not,
pruned after a crash."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from taskfleet.activities.git.scratch import ScratchDirs


def test_an_empty_folder_is_reused_and_a_dirty_one_removed(tmp_path: Path):
    dirs = ScratchDirs(tmp_path / "scratch")
    first = dirs.take()
    assert first.is_dir() and not any(first.iterdir())
    dirs.give_back(first)
    assert dirs.take() == first  # left empty: reused
    (first / "output.txt").write_text("left behind")
    dirs.give_back(first)
    assert not first.exists()  # left files: removed
    second = dirs.take()
    assert second != first and not any(second.iterdir())


def test_two_running_tasks_never_share_a_folder(tmp_path: Path):
    dirs = ScratchDirs(tmp_path / "scratch")
    a, b = dirs.take(), dirs.take()
    assert a != b


def test_folders_of_a_worker_that_is_gone_are_pruned(tmp_path: Path):
    root = tmp_path / "scratch"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    (root / str(dead_pid) / "tmpabc").mkdir(parents=True)
    (root / str(os.getppid())).mkdir(parents=True)  # a live process: kept
    mine = ScratchDirs(root)
    mine.take()
    assert mine.prune_stale() == [root / str(dead_pid)]
    assert not (root / str(dead_pid)).exists()
    assert (root / str(os.getppid())).is_dir() and (root / str(os.getpid())).is_dir()
