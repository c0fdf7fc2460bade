"""Applying one git op to a local clone (commit in a worktree, merge without a checkout). Every step
is idempotent so a retried push activity re-applies its batch safely: a commit already on the
branch (its `Taskfleet-Op` trailer) or a branch already merged is not done again. Git gets argv,
no shell."""

from __future__ import annotations

import os
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from git import Repo, SymbolicReference
from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError

from taskfleet.core.git_objects import GitStoreError, branch_tip
from taskfleet.core.git_op_validation import branch_name_problem
from taskfleet.core.models.git_batch import GitOp

OP_TRAILER = "Taskfleet-Op"
_FALLBACK_IDENTITY = {
    "GIT_AUTHOR_NAME": "taskfleet",
    "GIT_AUTHOR_EMAIL": "taskfleet@localhost",
    "GIT_COMMITTER_NAME": "taskfleet",
    "GIT_COMMITTER_EMAIL": "taskfleet@localhost",
}


class OpFailed(Exception):
    """This op cannot land; the message says why, for a person. The rest of the batch goes on."""


@dataclass
class Applied:
    """What applying an op left to push: the ref, its commit, and whether this attempt made it."""

    ref: str
    commit: str
    made_commit: bool
    note: str = ""
    # merge: the merged branch's tip (the outcome's `branch_commit`); else empty.
    branch_commit: str = ""


def check_expected(repo: Repo, op: GitOp) -> None:
    """Work committed on a branch that has moved since `expect_commit` is not what was verified."""
    if not op.expect_commit:
        return
    actual = ref_commit(repo, f"refs/heads/{op.branch}")
    if actual != op.expect_commit:
        raise OpFailed(
            f"branch {op.branch} is at {actual or '(missing)'} in the clone, not at the expected "
            f"commit {op.expect_commit}: it moved after the op was sent; nothing of it was pushed")


# Commits of a batch run in parallel worktrees: an automatic gc started by one of them would race
# the others, and costs a process per commit. Maintenance is left to the clone's owner.
_NO_AUTO_MAINTENANCE = {
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "maintenance.auto",
    "GIT_CONFIG_VALUE_0": "false",
    "GIT_CONFIG_KEY_1": "gc.auto",
    "GIT_CONFIG_VALUE_1": "0",
}


def commit_env(repo: Repo) -> dict[str, str]:
    """Environment for `git commit`: no auto maintenance, and a fallback author on machines with no
    git identity (a configured one always wins)."""
    env = dict(_NO_AUTO_MAINTENANCE)
    reader = repo.config_reader()
    if not (reader.has_option("user", "name") and reader.has_option("user", "email")):
        env.update({k: v for k, v in _FALLBACK_IDENTITY.items() if k not in os.environ})
    return env


def ref_commit(repo: Repo, ref: str) -> str | None:
    """The commit a ref names, or None. Branches and remote-tracking refs are read from the ref
    files in-process (a batch asks several per op); anything else is asked of git."""
    if ref.startswith(("refs/heads/", "refs/remotes/")):
        try:
            return SymbolicReference.dereference_recursive(repo, ref)
        except ValueError:
            return None  # neither a loose nor a packed ref of that name
        except OSError:
            pass
    try:
        return repo.git.rev_parse("--verify", "--quiet", f"{ref}^{{commit}}")
    except GitCommandError:
        return None


def _trailer_line(op: GitOp) -> str:
    return f"{OP_TRAILER}: {op.id}"


def _message_with_trailer(op: GitOp, default: str) -> list[str]:
    return ["-m", op.message or default, "-m", _trailer_line(op)]


def _head_sha(worktree: Repo) -> str | None:
    """HEAD's commit read from the ref files, without starting a git process."""
    try:
        return SymbolicReference.dereference_recursive(worktree, "HEAD")
    except ValueError:
        return None  # an unborn branch


def _open_worktree(path: str) -> Repo:
    try:
        return Repo(path)
    except (InvalidGitRepositoryError, NoSuchPathError):
        raise OpFailed(f"worktree {path} is not a git checkout") from None


@dataclass
class Checkout:
    """A checkout's git state read from its files in microseconds: no `Repo`, no git process."""

    root: Path
    git_dir: Path
    common_dir: Path
    branch: str  # "" when HEAD is detached

    @classmethod
    def read(cls, path: str) -> Checkout:
        root = Path(path)
        if not root.is_dir():
            raise OpFailed(f"worktree {path} does not exist on this worker")
        dot_git = root / ".git"
        try:
            if dot_git.is_dir():
                git_dir = dot_git
            else:  # a linked worktree: `.git` is a file naming its git dir
                text = dot_git.read_text().strip()
                if not text.startswith("gitdir: "):
                    raise OSError
                git_dir = (root / text[len("gitdir: ") :]).resolve()
            commondir = git_dir / "commondir"
            common = ((git_dir / commondir.read_text().strip()).resolve() if commondir.is_file()
                      else git_dir.resolve())
            head = (git_dir / "HEAD").read_text().strip()
        except OSError:
            raise OpFailed(f"worktree {path} is not a git checkout") from None
        branch = head[len("ref: refs/heads/") :] if head.startswith("ref: refs/heads/") else ""
        return cls(root, git_dir, common, branch)

    def branch_commit(self) -> str | None:
        """The branch's commit from its loose ref (where `git commit` just wrote it), else git."""
        try:
            return (self.common_dir / "refs" / "heads" / self.branch).read_text().strip() or None
        except OSError:
            worktree = _open_worktree(str(self.root))
            try:
                return _head_sha(worktree)
            finally:
                worktree.close()


def _check_worktree(repo: Repo, op: GitOp) -> Checkout:
    """The op's worktree, once known to be a checkout of this clone on the op's branch."""
    checkout = Checkout.read(op.worktree)
    if checkout.common_dir != Path(repo.common_dir).resolve():
        raise OpFailed(
            f"worktree {op.worktree} belongs to another repository than {repo.working_dir}")
    if checkout.branch != op.branch:
        raise OpFailed(
            f"worktree {op.worktree} is on {checkout.branch or 'a detached HEAD'}, not on branch "
            f"{op.branch}; run `git switch {op.branch}` there or send the right worktree")
    root = checkout.root.resolve()
    for name in op.files:
        resolved = (root / name).resolve()
        if resolved != root and root not in resolved.parents:
            raise OpFailed(f"file {name} resolves outside the worktree {op.worktree}")
    return checkout


def apply_commit(repo: Repo, op: GitOp, first_attempt: bool = False) -> Applied:
    """Stage the op's files (all when none are named) in its worktree and commit on its branch; only
    `add` and `commit` spawn git (refs are read from files, messages via `cat-file`)."""
    _check_worktree(repo, op)
    worktree = _open_worktree(op.worktree)
    try:
        return _commit_in(repo, worktree, op, first_attempt)
    finally:
        worktree.close()


def _commit_in(repo: Repo, worktree: Repo, op: GitOp, first_attempt: bool) -> Applied:
    head = _head_sha(worktree)
    # Only a batch that ran before can have committed this op (op ids are unique per batcher).
    resumable = head is not None and not first_attempt
    if resumable and _trailer_line(op) in repo.commit(head).message.splitlines():
        return Applied(f"refs/heads/{op.branch}", head, made_commit=False, note="already committed")
    if op.files:
        worktree.git.add("-A", "--", *op.files)
    else:
        worktree.git.add("-A")
    status, out, err = worktree.git.commit(
        *_message_with_trailer(op, ""),
        env=commit_env(worktree),
        with_exceptions=False,
        with_extended_output=True,
    )
    if status != 0:
        if "nothing to commit" in out or "nothing added to commit" in out:
            if head is None:
                raise OpFailed(f"nothing to commit on new branch {op.branch}")
            return Applied(f"refs/heads/{op.branch}", head, made_commit=False,
                           note="nothing to commit")
        raise OpFailed(f"git commit failed: {(err or out).strip().splitlines()[-1]}")
    return Applied(f"refs/heads/{op.branch}", _head_sha(worktree) or "", made_commit=True)


def default_branch(repo: Repo, remote: str) -> str:
    """The remote's default branch, as `origin/HEAD` records it, else main or master."""
    try:
        ref = repo.git.symbolic_ref("--quiet", f"refs/remotes/{remote}/HEAD")
        return ref.split(f"refs/remotes/{remote}/", 1)[1]
    except (GitCommandError, IndexError):
        pass
    for name in ("main", "master"):
        if (ref_commit(repo, f"refs/heads/{name}")
                or ref_commit(repo, f"refs/remotes/{remote}/{name}")):
            return name
    raise OpFailed(f"cannot tell the default branch of {remote}; give the op a 'target'")


def _branch_commit(repo: Repo, remote: str, branch: str) -> str | None:
    return (ref_commit(repo, f"refs/heads/{branch}")
            or ref_commit(repo, f"refs/remotes/{remote}/{branch}"))


def _checked_out_at(repo: Repo, branch: str) -> Path | None:
    """The worktree (main checkout included) that has `branch` checked out, if any."""
    path: str | None = None
    for line in repo.git.worktree("list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            path = line[len("worktree ") :]
        elif line == f"branch refs/heads/{branch}" and path:
            return Path(path)
    return None


def apply_merge(repo: Repo, op: GitOp, remote: str) -> Applied:
    """Merge with `git merge-tree`, touching a checkout only if `target` is checked out."""
    check_expected(repo, op)
    target = op.target or default_branch(repo, remote)
    problem = branch_name_problem(target)
    if problem:
        raise OpFailed(problem)
    source = _branch_commit(repo, remote, op.branch)
    if not source:
        raise OpFailed(f"branch {op.branch} does not exist in {repo.working_dir} nor on {remote}")
    ref = f"refs/heads/{target}"
    local = ref_commit(repo, ref)
    try:
        base = branch_tip(repo.working_dir, target, remote)
    except GitStoreError as err:
        raise OpFailed(str(err)) from None
    if not base:
        raise OpFailed(
            f"target branch {target} does not exist in {repo.working_dir} nor on {remote}")
    is_merged, _, _ = repo.git.merge_base(
        "--is-ancestor", source, base, with_exceptions=False, with_extended_output=True
    )
    if is_merged == 0:
        if local != base:
            _move_target(repo, target, base, local)
        return Applied(ref, base, made_commit=False, note=f"{op.branch} already in {target}",
                       branch_commit=source)

    status, out, err = repo.git.merge_tree(
        "--write-tree",
        "--name-only",
        "--no-messages",
        base,
        source,
        with_exceptions=False,
        with_extended_output=True,
    )
    if status == 1:
        lines = out.splitlines()
        conflicted = sorted({line for line in lines[1:] if line.strip()})
        raise OpFailed(f"merging {op.branch} into {target} conflicts in: "
                       f"{', '.join(conflicted) or '(unknown)'}; rebase {op.branch} onto {target} "
                       "and send the merge again")
    if status != 0:
        raise OpFailed(f"git merge-tree failed: {err.strip() or out.strip()}")
    tree = out.splitlines()[0].strip()
    merge_commit = repo.git.commit_tree(
        tree,
        "-p",
        base,
        "-p",
        source,
        *_message_with_trailer(op, f"Merge branch '{op.branch}' into {target}"),
        env=commit_env(repo),
    ).strip()
    _move_target(repo, target, merge_commit, local)
    return Applied(ref, merge_commit, made_commit=True, branch_commit=source)


def _move_target(repo: Repo, target: str, new: str, old: str | None) -> None:
    """Point the local `target` at `new`, a descendant of its tip `old`."""
    ref = f"refs/heads/{target}"
    checkout = _checked_out_at(repo, target)
    if checkout is not None:
        # Moving a checked-out branch's ref alone would leave its files stale: fast-forward it.
        try:
            Repo(checkout).git.merge("--ff-only", new)
        except GitCommandError as err:
            raise OpFailed(
                f"{target} is checked out at {checkout} and could not be fast-forwarded: "
                f"{err.stderr.strip()}"
            ) from None
    elif old:
        repo.git.update_ref(ref, new, old)
    else:
        repo.git.update_ref(ref, new)


def apply_push(repo: Repo, op: GitOp, remote: str) -> Applied:
    """A push op only names a branch to include in the batch's push."""
    commit = ref_commit(repo, f"refs/heads/{op.branch}")
    if not commit:
        raise OpFailed(f"branch {op.branch} does not exist in {repo.working_dir}")
    check_expected(repo, op)
    return Applied(f"refs/heads/{op.branch}", commit, made_commit=False)


def apply_op(repo: Repo, op: GitOp, remote: str, first_attempt: bool = False) -> Applied:
    try:
        if op.op_type == "commit":
            return apply_commit(repo, op, first_attempt)
        if op.op_type == "merge":
            return apply_merge(repo, op, remote)
        if op.op_type == "push":
            return apply_push(repo, op, remote)
    except GitCommandError as err:
        detail = (err.stderr or str(err)).strip().splitlines()
        raise OpFailed(f"git {op.op_type} failed: {detail[-1] if detail else err}") from None
    raise OpFailed(f"unknown op_type {op.op_type!r}")


# Commits a wave of independent commit ops from ONE shell: git processes fork from sh in parallel,
# not one Python spawn (holding the GIL) per call. Values arrive as positional arguments, never as
# script text. (Two literals: the subshell's line is longer than this file's lines.)
_WAVE_SCRIPT = (r"""
i=0
while [ "$#" -gt 0 ]; do
  wt=$1 msg=$2 trailer=$3
  shift 3
  ( cd -- "$wt" && git add -A >/dev/null 2>&1 && """
                r"""git commit -q -m "$msg" -m "$trailer" >/dev/null 2>&1
    printf '%s\t%s\n' "$i" "$?" ) &
  i=$((i + 1))
done
wait
""")


def commit_wave(repo: Repo, ops: list[GitOp], checkouts: dict[str, Checkout]) -> dict[str, Applied]:
    """First attempt at a wave of whole-worktree commit ops, in parallel: the ops that committed
    (the rest are left to `apply_commit`). `checkouts`: each op's checked worktree."""
    args: list[str] = []
    for op in ops:
        args += [op.worktree, op.message, _trailer_line(op)]
    env = {**os.environ, **commit_env(repo)}
    done = subprocess.run(["sh", "-c", _WAVE_SCRIPT, "sh", *args], env=env, capture_output=True,
                          text=True, check=False)
    committed: dict[str, Applied] = {}
    for line in done.stdout.splitlines():
        index, _, code = line.partition("\t")
        if code == "0" and index.isdigit() and int(index) < len(ops):
            op = ops[int(index)]
            head = checkouts[op.id].branch_commit()
            if head:
                committed[op.id] = Applied(f"refs/heads/{op.branch}", head, made_commit=True)
    return committed


def _parallel_waves(ops: list[GitOp]) -> list[list[GitOp]]:
    """Split ops into waves that may run at once: only consecutive commit ops on distinct branches
    and worktrees share one (separate refs and indexes); any other op is a barrier."""
    waves: list[list[GitOp]] = []
    current: list[GitOp] = []
    seen: set[str] = set()
    for op in ops:
        keys = {f"b:{op.branch}", f"w:{op.worktree}"}
        if op.op_type == "commit" and not keys & seen:
            current.append(op)
            seen |= keys
            continue
        if current:
            waves.append(current)
        if op.op_type == "commit":
            current, seen = [op], keys
        else:
            waves.append([op])
            current, seen = [], set()
    if current:
        waves.append(current)
    return waves


def apply_batch(
    repo_path: str, ops: list[GitOp], remote: str, first_attempt: bool = False, workers: int = 4
) -> dict[str, Applied | OpFailed]:
    """Apply ops as if in order, running independent commits in parallel; each thread opens its own
    `Repo`, as GitPython objects are not thread-safe."""
    local = threading.local()
    opened: list[Repo] = []
    lock = threading.Lock()

    def repo_for_thread() -> Repo:
        if not hasattr(local, "repo"):
            local.repo = Repo(repo_path)
            with lock:
                opened.append(local.repo)
        return local.repo

    def apply_one(op: GitOp) -> Applied | OpFailed:
        try:
            return apply_op(repo_for_thread(), op, remote, first_attempt)
        except OpFailed as err:
            return err

    results: dict[str, Applied | OpFailed] = {}
    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="git-apply") as pool:
            for wave in _parallel_waves(ops):
                if len(wave) > 1 and first_attempt:
                    ready, checked = [], {}
                    for op in wave:
                        try:
                            checked[op.id] = _check_worktree(repo_for_thread(), op)
                        except OpFailed as err:
                            results[op.id] = err
                            continue
                        if not op.files:
                            ready.append(op)
                    if len(ready) > 1:
                        results.update(commit_wave(repo_for_thread(), ready, checked))
                wave = [op for op in wave if op.id not in results]
                for op, result in zip(wave, pool.map(apply_one, wave)):
                    results[op.id] = result
    finally:
        for repo in opened:
            repo.close()
    return results
