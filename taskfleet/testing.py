"""Real git repositories with a bare remote that counts pushes, for tests, benchmarks and the demo."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from taskfleet.models import GitOp


def git(cwd: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout.strip()


@dataclass
class GitRemoteFixture:
    """A clone with a bare `origin`, whose pre-receive hook counts the pushes it receives."""

    clone: Path
    remote: Path
    push_log: Path

    def pushes(self) -> int:
        if not self.push_log.exists():
            return 0
        return len(self.push_log.read_text().splitlines())

    def remote_ref(self, branch: str) -> str | None:
        out = git(self.remote, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False)
        return out or None

    def worktree(self, branch: str, base: str = "main") -> Path:
        path = self.clone.parent / "wt" / branch.replace("/", "_")
        git(self.clone, "worktree", "add", "-q", "-b", branch, str(path), base)
        return path

    def change(self, worktree: Path, name: str, content: str) -> None:
        target = worktree / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)

    def commit_ops(self, prefix: str, count: int) -> list[GitOp]:
        """`count` commit ops, each on its own worktree and branch `<prefix>/<i>` with one new file."""
        ops = []
        for i in range(count):
            branch = f"{prefix}/{i}"
            wt = self.worktree(branch)
            self.change(wt, f"{i}.txt", f"{branch}\n")
            ops.append(GitOp(op_type="commit", branch=branch, message=f"change {i}", worktree=str(wt), id=f"{prefix}-{i}"))
        return ops

    def install_hook(self, name: str, body: str) -> None:
        hook = self.remote / "hooks" / name
        hook.write_text("#!/bin/sh\n" + body)
        hook.chmod(0o755)


def make_git_remote(root: Path, seed_from: Path | None = None, message: str = "seed") -> GitRemoteFixture:
    """A bare remote whose `main` holds `seed_from`'s files (or two small files), and a clone of it."""
    root.mkdir(parents=True, exist_ok=True)
    remote = root / "remote.git"
    clone = root / "clone"
    push_log = root / "pushes.log"
    git(root, "init", "-q", "--bare", "-b", "main", str(remote))
    seed = root / "seed"
    if seed_from is not None:
        shutil.copytree(seed_from, seed)
    else:
        seed.mkdir()
        (seed / "README.md").write_text("seed\n")
        (seed / "shared.txt").write_text("line 1\nline 2\nline 3\n")
    git(seed, "init", "-q", "-b", "main")
    git(seed, "add", "-A")
    # An identity for machines that have none configured (the environment still wins).
    git(seed, "-c", "user.name=taskfleet", "-c", "user.email=taskfleet@localhost", "commit", "-q", "-m", message)
    git(seed, "push", "-q", str(remote), "main")
    git(root, "clone", "-q", str(remote), str(clone))
    fixture = GitRemoteFixture(clone=clone, remote=remote, push_log=push_log)
    # Installed after the seed push, so only pushes under test are counted.
    fixture.install_hook("pre-receive", f'cat > /dev/null\necho push >> "{push_log}"\n')
    return fixture
