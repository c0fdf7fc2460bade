"""Empty working folders for tasks that run without a worktree (`worktree = false`). An emptied
folder is reused (mkdir and rmdir are journaled writes on every task); one with files left is
removed. Each worker process keeps its own `<state>/scratch/<pid>/`; its start removes those of
dead ones."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from taskfleet.activities.processes.executor_records import process_alive

KEEP_AT_MOST = 1000


class ScratchDirs:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._mine = root / str(os.getpid())
        self._free: list[Path] = []

    def take(self) -> Path:
        """An empty folder that no other running task uses."""
        while self._free:
            folder = self._free.pop()
            if folder.is_dir():
                return folder
        self._mine.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(dir=self._mine))

    def give_back(self, folder: Path) -> None:
        """Reuse the folder if the task left it empty, else remove it."""
        try:
            with os.scandir(folder) as entries:
                empty = next(entries, None) is None
        except OSError:
            return
        if empty and len(self._free) < KEEP_AT_MOST:
            self._free.append(folder)
        else:
            shutil.rmtree(folder, ignore_errors=True)

    def prune_stale(self) -> list[Path]:
        """Remove the scratch folders of worker processes that no longer run."""
        removed = []
        for entry in self.root.glob("*") if self.root.is_dir() else []:
            if (entry.name.isdigit() and int(entry.name) != os.getpid()
                    and not process_alive(int(entry.name))):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
        return removed

