"""A real git repository with a bare remote whose hook counts pushes: the demo's sandbox. The demo's
"one push for nine tasks" is the remote's own count, from a `pre-receive` hook installed after
the seed push. Tests build on this (`taskfleet.testing`)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


def git(cwd: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout.strip()


@dataclass
class SampleRemote:
    """A clone with a bare `origin`, whose pre-receive hook counts the pushes it receives."""

    clone: Path
    remote: Path
    push_log: Path

    def pushes(self) -> int:
        if not self.push_log.exists():
            return 0
        return len(self.push_log.read_text().splitlines())

    def install_hook(self, name: str, body: str) -> None:
        hook = self.remote / "hooks" / name
        hook.write_text("#!/bin/sh\n" + body)
        hook.chmod(0o755)


def seed_remote(root: Path, seed_from: Path | None = None,
                message: str = "seed") -> tuple[Path, Path, Path]:
    """A bare remote at `root/remote.git` whose `main` holds `seed_from`'s files (or two small
    files), and its clone at `root/clone`; returns (clone, remote, push log path)."""
    root.mkdir(parents=True, exist_ok=True)
    remote, clone, push_log = root / "remote.git", root / "clone", root / "pushes.log"
    git(root, "init", "-q", "--bare", "-b", "main", str(remote))
    seed = root / "seed"
    if seed_from is not None:
        shutil.copytree(seed_from, seed, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        seed.mkdir()
        (seed / "README.md").write_text("seed\n")
        (seed / "shared.txt").write_text("line 1\nline 2\nline 3\n")
    git(seed, "init", "-q", "-b", "main")
    git(seed, "add", "-A")
    # An identity for machines that have none configured (the environment still wins).
    git(seed, "-c", "user.name=taskfleet", "-c", "user.email=taskfleet@localhost", "commit",
        "-q", "-m", message)
    git(seed, "push", "-q", str(remote), "main")
    git(root, "clone", "-q", str(remote), str(clone))
    return clone, remote, push_log


def make_sample_remote(root: Path, seed_from: Path | None = None,
                       message: str = "seed") -> SampleRemote:
    sample = SampleRemote(*seed_remote(root, seed_from, message))
    # Installed after the seed push, so only the pushes that follow are counted.
    sample.install_hook("pre-receive", f'cat > /dev/null\necho push >> "{sample.push_log}"\n')
    return sample
