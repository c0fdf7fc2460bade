"""Helpers for tests of code that uses taskfleet: real git repositories with a bare remote."""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from taskfleet.core.models.git_batch import GitOp
from taskfleet.sample_remote import SampleRemote, git, seed_remote

__all__ = ["GitRemoteFixture", "git", "make_git_remote"]


@dataclass
class GitRemoteFixture(SampleRemote):
    """A `SampleRemote` with what tests need: worktrees, changes, refs on the remote, commit ops."""

    def remote_ref(self, branch: str) -> str | None:
        out = git(self.remote, "rev-parse", "--verify", "--quiet",
                  f"refs/heads/{branch}", check=False)
        return out or None

    def worktree(self, branch: str, base: str = "main") -> Path:
        path = self.clone.parent / "wt" / branch.replace("/", "_")
        git(self.clone, "worktree", "add", "-q", "-b", branch, str(path), base)
        return path

    def change(self, worktree: Path, name: str, content: str) -> None:
        target = worktree / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)

    def branch_with(self, branch: str, files: dict[str, str | None], base: str = "main",
                    message: str = "") -> str:
        """Commit `files` (path -> content; None deletes) on a new `branch` from `base` in the
        clone, without a checkout (a private index); returns the commit."""
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}

            def run(*args: str, stdin: str | None = None) -> str:
                done = subprocess.run(["git", *args], cwd=self.clone, env=env, input=stdin,
                                      capture_output=True, text=True, check=True)
                return done.stdout.strip()

            run("read-tree", base)
            for path, content in files.items():
                if content is None:
                    run("update-index", "--force-remove", "--", path)
                else:
                    blob = run("hash-object", "-w", "--stdin", stdin=content)
                    run("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}")
            tree = run("write-tree")
            commit = run("commit-tree", tree, "-p", base, "-m", message or f"{branch}: change")
            run("update-ref", f"refs/heads/{branch}", commit)
        return commit

    def many_branches(self, prefix: str, count: int, base: str = "main") -> dict[str, str]:
        """`count` branches `<prefix>/<i>` off `base`, each adding `<prefix>/<i>.txt`, written by
        one `git fast-import`; returns branch -> commit."""
        start = git(self.clone, "rev-parse", base)
        script = []
        for i in range(count):
            body = f"{prefix}/{i}\n"
            message = f"{prefix} {i}\n"
            script += [f"commit refs/heads/{prefix}/{i}", f"mark :{i + 1}",
                       "committer taskfleet tests <tests@taskfleet.invalid> 1700000000 +0000",
                       f"data {len(message.encode())}", message + f"from {start}",
                       f"M 100644 inline {prefix}/{i}.txt", f"data {len(body.encode())}", body]
        subprocess.run(["git", "fast-import", "--quiet"], cwd=self.clone,
                       input="\n".join(script) + "\n", text=True, check=True, capture_output=True)
        heads = git(self.clone, "for-each-ref", "--format=%(refname:short) %(objectname)",
                    f"refs/heads/{prefix}/")
        return dict(line.split(" ", 1) for line in heads.splitlines())

    def commit_ops(self, prefix: str, count: int) -> list[GitOp]:
        """`count` commit ops, each on its own worktree and branch `<prefix>/<i>`, adding a file."""
        ops = []
        for i in range(count):
            branch = f"{prefix}/{i}"
            wt = self.worktree(branch)
            self.change(wt, f"{i}.txt", f"{branch}\n")
            ops.append(GitOp(op_type="commit", branch=branch, message=f"change {i}",
                             worktree=str(wt), id=f"{prefix}-{i}"))
        return ops


def make_git_remote(root: Path, seed_from: Path | None = None,
                    message: str = "seed") -> GitRemoteFixture:
    """A bare remote whose `main` holds `seed_from`'s files (or two small files), and its clone."""
    fixture = GitRemoteFixture(*seed_remote(root, seed_from, message))
    # Installed after the seed push, so only pushes under test are counted.
    fixture.install_hook("pre-receive", f'cat > /dev/null\necho push >> "{fixture.push_log}"\n')
    return fixture
