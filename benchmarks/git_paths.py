"""The git steps of a task, each timed through every way of doing it, side by side.

For the steps a task takes in a pool slot (prepare the slot on a new branch at the base, find what
the command changed, write the tree and commit, move the branch, scrub the slot) and the stores'
object reads, this times: plain git commands (a process per call, as GitPython runs them), git's
batch modes (`update-ref --stdin`, `hash-object --stdin-paths -w`, `mktree --batch`, `cat-file
--batch`, `status --porcelain=v2` with the untracked cache and a split index), hand-written object
and ref files, libgit2 in process (pygit2), and the slot's inotify watch; on the demo repository and
on a generated repository of many files. A task edits one file and adds one in a new folder;
verification leaves a bytecode file. Prints per-step medians (ms), the path taskfleet takes per
step, and the per-task sum of taskfleet's path against the porcelain one.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pygit2  # noqa: E402
from common import emit  # noqa: E402

from taskfleet.activities.git.slot_watch import SlotWatch  # noqa: E402
from taskfleet.activities.git.work_commit import restore_paths, snapshot  # noqa: E402
from taskfleet.activities.git.worktree_refs import detach_head, point_branch  # noqa: E402
from taskfleet.core.git_objects import compare_and_swap, object_reader, open_repository  # noqa: E402
from taskfleet.testing import make_git_remote  # noqa: E402

ENV = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
       "GIT_COMMITTER_EMAIL": "b@b", "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "gc.auto",
       "GIT_CONFIG_VALUE_0": "0"}

# The path taskfleet takes per step, and the porcelain path it replaces.
CHOSEN = {"prepare": "pygit2", "changes": "inotify watch", "commit": "pygit2",
          "refs": "pygit2 transaction", "scrub": "pygit2 restore of known paths", "read": "pygit2"}
PORCELAIN = {"prepare": "git checkout -B", "changes": "git add -A", "commit": "git commit (index)",
             "refs": "git update-ref", "scrub": "git reset --hard + clean -ffdx",
             "read": "git cat-file --batch"}


def git(cwd: Path, *args: str, data: bytes | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, input=data, capture_output=True, check=True,
                          env=ENV).stdout.decode().strip()


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


# --- hand-written object and ref files (the kind of writer taskfleet no longer keeps) ------------

def loose_write(git_dir: Path, kind: str, content: bytes) -> str:
    data = f"{kind} {len(content)}\0".encode() + content
    oid = hashlib.sha1(data).hexdigest()
    path = git_dir / "objects" / oid[:2] / oid[2:]
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent)
        with os.fdopen(fd, "wb") as out:
            out.write(zlib.compress(data))
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        os.unlink(tmp)
    return oid


def locked_write(path: Path, content: str, precondition=None) -> bool:
    lock = path.with_name(path.name + ".lock")
    fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        if precondition is not None and not precondition():
            os.close(fd)
            lock.unlink()
            return False
        os.write(fd, content.encode())
        os.close(fd)
        os.rename(lock, path)
        return True
    except BaseException:
        lock.unlink(missing_ok=True)
        raise


def tree_entries(raw: bytes) -> list[tuple[bytes, bytes, bytes]]:
    out, i = [], 0
    while i < len(raw):
        space = raw.index(b" ", i)
        nul = raw.index(b"\0", space)
        out.append((raw[i:space], raw[space + 1:nul], raw[nul + 1:nul + 21]))
        i = nul + 21
    return out


def hand_tree(repo: pygit2.Repository, git_dir: Path, tree_id: str,
              changes: dict[str, tuple[str, bytes]]) -> str:
    """`tree_id` with `changes` ({path: (blob id, mode)}) applied, objects written by hand."""
    entries = ({name: (mode, oid) for mode, name, oid in tree_entries(repo[tree_id].read_raw())}
               if tree_id else {})
    nested: dict[bytes, dict] = {}
    for path, (oid, mode) in changes.items():
        head, _, rest = path.partition("/")
        if rest:
            nested.setdefault(head.encode(), {})[rest] = (oid, mode)
        else:
            entries[head.encode()] = (mode, bytes.fromhex(oid))
    for name, sub in nested.items():
        current = entries.get(name)
        sub_id = hand_tree(repo, git_dir,
                           current[1].hex() if current and current[0] == b"40000" else "", sub)
        entries[name] = (b"40000", bytes.fromhex(sub_id))
    ordered = sorted(entries.items(), key=lambda e: e[0] + (b"/" if e[1][0] == b"40000" else b""))
    content = b"".join(mode + b" " + name + b"\0" + oid for name, (mode, oid) in ordered)
    return loose_write(git_dir, "tree", content)


# --- git's batch modes -------------------------------------------------------------------------

class Batch:
    """One long-lived git process per batch mode, as a worker would keep them."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.cat = subprocess.Popen(["git", "cat-file", "--batch"], cwd=cwd, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, env=ENV)
        self.mktree = subprocess.Popen(["git", "mktree", "--batch"], cwd=cwd, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, env=ENV)
        self.refs = subprocess.Popen(["git", "update-ref", "--stdin"], cwd=cwd,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=ENV)

    def read(self, spec: str) -> bytes:
        self.cat.stdin.write(spec.encode() + b"\n")
        self.cat.stdin.flush()
        header = self.cat.stdout.readline().split()
        data = self.cat.stdout.read(int(header[2]))
        self.cat.stdout.read(1)
        return data

    def tree(self, listing: list[str]) -> str:
        self.mktree.stdin.write(("".join(line + "\n" for line in listing) + "\n").encode())
        self.mktree.stdin.flush()
        return self.mktree.stdout.readline().decode().strip()

    def update(self, ref: str, new: str, old: str) -> None:
        self.refs.stdin.write(f"start\nupdate {ref} {new} {old}\nprepare\ncommit\n".encode())
        self.refs.stdin.flush()
        for _ in range(3):
            self.refs.stdout.readline()

    def edit_tree(self, tree_id: str, changes: dict[str, tuple[str, str]]) -> str:
        entries: dict[str, str] = {}
        if tree_id:
            for mode, name, oid in tree_entries(self.read(tree_id)):
                kind = "tree" if mode == b"40000" else "blob"
                entries[name.decode()] = f"{mode.decode().zfill(6)} {kind} {oid.hex()}"
        nested: dict[str, dict] = {}
        for path, (oid, mode) in changes.items():
            head, _, rest = path.partition("/")
            if rest:
                nested.setdefault(head, {})[rest] = (oid, mode)
            else:
                entries[head] = f"{mode} blob {oid}"
        for name, sub in nested.items():
            current = entries.get(name, "")
            sub_id = self.edit_tree(current.split()[2] if current.startswith("040000") else "", sub)
            entries[name] = f"040000 tree {sub_id}"
        return self.tree([f"{line}\t{name}" for name, line in entries.items()])

    def close(self) -> None:
        for proc in (self.cat, self.mktree, self.refs):
            proc.stdin.close()
            proc.wait()


# --- one repository ---------------------------------------------------------------------------

def measure(clone: Path, reps: int, edit_path: str) -> dict:
    base = git(clone, "rev-parse", "HEAD")
    slots = clone.parent / "slots"
    slot = slots / "s1"
    git(clone, "worktree", "add", "-q", "--detach", str(slot), base)
    status_slot = slots / "s2"  # its own index: split and with the untracked cache
    git(clone, "worktree", "add", "-q", "--detach", str(status_slot), base)
    git(status_slot, "config", "core.untrackedCache", "true")
    git(status_slot, "update-index", "--split-index", "--untracked-cache")
    git(status_slot, "status", "--porcelain=v2")  # fills the cache
    common = Path(git(clone, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    admin = Path(git(slot, "rev-parse", "--path-format=absolute", "--git-dir"))
    repo = open_repository(slot)
    batch = Batch(slot)
    samples: dict[str, dict[str, list[float]]] = {}

    def add(step: str, way: str, ms: float) -> None:
        samples.setdefault(step, {}).setdefault(way, []).append(ms)

    def task_edits(where: Path, i: int) -> list[str]:
        with open(where / edit_path, "a") as out:
            out.write(f"edit {i}\n")
        (where / f"new{i}").mkdir()
        (where / f"new{i}" / "added.txt").write_text(f"added {i}\n")
        return [edit_path, f"new{i}", f"new{i}/added.txt"]

    def reset(where: Path) -> None:
        git(where, "checkout", "-q", "--detach", base)
        git(where, "reset", "-q", "--hard")
        git(where, "clean", "-qffdx")

    watch = SlotWatch(slot)
    for i in range(reps):
        # prepare: the slot (clean at the base) on a new branch there
        b = f"bench/p{i}"
        def hand_prepare() -> None:
            (common / "refs" / "heads" / "bench").mkdir(parents=True, exist_ok=True)
            locked_write(common / "refs" / "heads" / "bench" / f"h{i}", base + "\n")
            locked_write(admin / "HEAD", f"ref: refs/heads/bench/h{i}\n")
        add("prepare", "hand-written ref files", timed(hand_prepare))
        detach_head(slot, base)
        add("prepare", "pygit2", timed(lambda: point_branch(slot, b, base)))
        detach_head(slot, base)
        add("prepare", "git update-ref + symbolic-ref",
            timed(lambda: (git(slot, "update-ref", f"refs/heads/bench/u{i}", base),
                           git(slot, "symbolic-ref", "HEAD", f"refs/heads/bench/u{i}"))))
        detach_head(slot, base)
        add("prepare", "git checkout -B",
            timed(lambda: git(slot, "checkout", "-q", "-B", f"bench/c{i}", base)))
        detach_head(slot, base)

        # changes: what the command changed
        watch.take()
        touched = task_edits(slot, i)
        add("changes", "inotify watch", timed(watch.take))
        add("changes", "pygit2 status", timed(repo.status))
        add("changes", "git add -A", timed(lambda: git(slot, "add", "-A")))
        git(slot, "reset", "-q")
        task_edits(status_slot, i)
        add("changes", "git status --porcelain=v2 (untracked cache, split index)",
            timed(lambda: git(status_slot, "status", "--porcelain=v2")))
        reset(status_slot)

        # commit: the tree with the changed paths, and the commit (the branch is moved in `refs`)
        made = {}

        def fresh(way: str) -> None:
            """New content before each way: none of them finds its objects already written."""
            for path in touched:
                if (slot / path).is_file():
                    with open(slot / path, "a") as out:
                        out.write(f"{way} {i}\n")

        fresh("pygit2")

        def pygit2_commit() -> None:
            who = pygit2.Signature("b", "b@b")
            tree = snapshot(slot, base, touched)
            made["commit"] = str(repo.create_commit(None, who, who, "m\n", pygit2.Oid(hex=tree),
                                                    [pygit2.Oid(hex=base)]))
        add("commit", "pygit2", timed(pygit2_commit))

        def batch_commit() -> None:
            files = [p for p in touched if (slot / p).is_file()]
            ids = git(slot, "hash-object", "-w", "--stdin-paths",
                      data="\n".join(files).encode()).split()
            base_tree = batch.read(base).split(b"\n", 1)[0].split()[1].decode()  # "tree <id>"
            new = batch.edit_tree(base_tree, {p: (oid, "100644") for p, oid in zip(files, ids)})
            git(slot, "commit-tree", new, "-p", base, "-m", "m")
        fresh("batch")
        add("commit", "git batch (hash-object --stdin-paths -w, mktree --batch, commit-tree)",
            timed(batch_commit))

        def hand_commit() -> None:
            files = [p for p in touched if (slot / p).is_file()]
            changes = {p: (loose_write(common, "blob", (slot / p).read_bytes()), b"100644")
                       for p in files}
            new = hand_tree(repo, common, str(repo[base].peel(pygit2.Tree).id), changes)
            stamp = f"b <b@b> {int(time.time())} +0000"
            loose_write(common, "commit", f"tree {new}\nparent {base}\nauthor {stamp}\n"
                                          f"committer {stamp}\n\nm\n".encode())
        fresh("hand")
        add("commit", "hand-written objects", timed(hand_commit))

        git(slot, "add", "-A")
        git(slot, "checkout", "-q", "-b", f"bench/k{i}")
        add("commit", "git commit (index)",
            timed(lambda: git(slot, "commit", "-q", "--no-verify", "-m", "m")))
        git(slot, "reset", "-q", "--soft", base)  # staged again, for the next variant's scrub
        commit = made["commit"]

        # refs: the task branch moved by compare-and-swap
        for way, move in (
            ("pygit2 transaction", lambda r: compare_and_swap(slot, r, commit, base)),
            ("hand-written ref files", lambda r: locked_write(
                common.joinpath(*r.split("/")), commit + "\n",
                lambda: (common.joinpath(*r.split("/"))).read_text().strip() == base)),
            ("git update-ref --stdin (transaction)", lambda r: batch.update(r, commit, base)),
            ("git update-ref", lambda r: git(slot, "update-ref", r, commit, base)),
        ):
            ref = (f"refs/heads/bench/r{i}-{len(samples.get('refs', {}).get(way, []))}"
                   f"-{way.split()[0]}")
            git(slot, "update-ref", ref, base)
            add("refs", way, timed(lambda: move(ref)))

        # scrub: back to a clean checkout of the base (verification left bytecode too)
        def verify_leftovers() -> None:
            (slot / "__pycache__").mkdir(exist_ok=True)
            (slot / "__pycache__" / "m.pyc").write_bytes(b"pyc")

        verify_leftovers()
        git(slot, "reset", "-q")
        watch.take()
        detach_head(slot, base)
        git(slot, "reset", "-q", "--hard")
        git(slot, "clean", "-qffdx")
        watch.take()
        touched = task_edits(slot, i + 1000)
        verify_leftovers()
        known = watch.take()
        add("scrub", "pygit2 restore of known paths",
            timed(lambda: (detach_head(slot, base), restore_paths(slot, base, known))))
        assert git(slot, "status", "--porcelain", "--ignored") == "", (
            "a known-paths scrub left something")
        task_edits(slot, i + 2000)
        verify_leftovers()
        add("scrub", "git reset --hard + clean -ffdx", timed(lambda: (
            detach_head(slot, base), git(slot, "reset", "-q", "--hard"),
            git(slot, "clean", "-qffdx"))))
        watch.take()

        # read: one stored object, as the stores read a board or a chunk of outcomes
        spec = f"{base}:{edit_path}"

        def cat_file() -> None:
            with subprocess.Popen(["git", "cat-file", "--batch"], cwd=slot, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE) as proc:
                proc.communicate(spec.encode() + b"\n")
        add("read", "git cat-file --batch", timed(cat_file))

        def read_pygit2() -> None:
            with object_reader(slot) as reader:
                reader.read(spec)
        add("read", "pygit2", timed(read_pygit2))

    watch.close()
    batch.close()
    steps = {step: {way: round(statistics.median(v), 3) for way, v in ways.items()}
             for step, ways in samples.items()}
    fastest = {step: min(ways, key=ways.get) for step, ways in steps.items()}
    task_steps = ("prepare", "changes", "commit", "refs", "scrub")
    ours = sum(steps[s][CHOSEN[s]] for s in task_steps)
    # The porcelain path's `git commit` moves the branch itself: no separate ref step.
    theirs = sum(steps[s][PORCELAIN[s]] for s in task_steps if s != "refs")
    return {
        "files": int(git(clone, "ls-files", "--", ".").count("\n")) + 1,
        "reps": reps,
        "median_ms": steps,
        "fastest": fastest,
        "chosen": CHOSEN,
        "taskfleet_path_ms_per_task": round(ours, 2),
        "porcelain_path_ms_per_task": round(theirs, 2),
    }


def generated(root: Path, files: int) -> Path:
    fx = make_git_remote(root)
    clone = fx.clone
    for i in range(files):
        folder = clone / "src" / f"d{i // 500}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i}.txt").write_text(f"file {i}\nx\n")
    git(clone, "add", "-A")
    git(clone, "commit", "-qm", f"{files} files")
    return clone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--quick", action="store_true", help="2,000 files, 3 repetitions")
    args = parser.parse_args()
    if args.quick:
        args.files, args.reps = 2000, 3
    root = Path(tempfile.mkdtemp(prefix="bench-git-paths-"))
    try:
        demo = make_git_remote(root / "demo", seed_from=ROOT / "examples" / "demo-repo").clone
        demo_file = next(p for p in git(demo, "ls-files").splitlines() if p.endswith(".py"))
        figures = {
            "benchmark": "git_paths",
            "quick": args.quick,
            "repositories": {
                "demo": measure(demo, args.reps, demo_file),
                f"generated_{args.files}_files": measure(generated(root / "big", args.files),
                                                         args.reps, "src/d0/f0.txt"),
            },
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    emit(figures)


if __name__ == "__main__":
    main()
