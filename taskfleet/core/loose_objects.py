"""Git objects and refs of the board and run stores, written in-process as git writes them.

Storing a board or appending a chunk of outcomes is a blob, a tree, maybe a commit and a ref: five
or six `git` processes, milliseconds each, on the path of every run's start and end. The formats
are small and fixed, so they are written here directly:

- an object is `zlib(<type> <size>\\0<content>)` under `objects/<2 hex>/<rest>`, named by its hash
  (SHA-1, or SHA-256 in a repository made with `--object-format=sha256`); written to a temporary
  file and linked into place, so a reader never sees half an object and an existing one is kept;
- a ref is changed as git does: `<ref>.lock` created exclusively, the current value (loose file, or
  `packed-refs`) compared under that lock, then the lock renamed over the ref. Of two writers, git
  or us, exactly one holds the lock; the other fails and retries (compare-and-swap).

Only the plain case is handled (a repository whose layout `git rev-parse` reported, files refs, no
object-directory overrides in the environment); anything else raises `NotPlain` and the caller
runs git, which stays the authority.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Environment variables that move git's object or ref storage elsewhere: then only git knows.
_GIT_LOCATION_VARIABLES = ("GIT_DIR", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                           "GIT_INDEX_FILE", "GIT_NAMESPACE")


class NotPlain(Exception):
    """This repository or ref is not one written in-process; use git."""


@dataclass(frozen=True)
class Layout:
    common_dir: Path  # where objects/ and shared refs live
    algorithm: str  # "sha1" or "sha256"


_layouts: dict[str, Layout] = {}


def layout(repo: str | Path) -> Layout:
    """The repository's shared git folder and hash (asked of git once per process and folder)."""
    key = os.path.abspath(repo)
    found = _layouts.get(key)
    if found is not None and os.path.isdir(key) and (found.common_dir / "objects").is_dir():
        return found
    if any(os.environ.get(name) for name in _GIT_LOCATION_VARIABLES):
        raise NotPlain("git's storage is moved by the environment")
    done = subprocess.run(
        ["git", "-C", key, "rev-parse", "--path-format=absolute", "--git-common-dir", "--show-object-format"],
        capture_output=True, text=True, check=False,
    )
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) != 2 or lines[1] not in ("sha1", "sha256"):
        raise NotPlain(f"git rev-parse in {key}: {done.stderr.strip() or done.stdout.strip()}")
    common = Path(lines[0])
    try:
        config = (common / "config").read_text(errors="replace").lower()
    except OSError as err:
        raise NotPlain(f"{common}/config: {err}") from None
    if "refstorage" in config:  # reftable refs: only git writes them
        raise NotPlain("refs kept in a reftable")
    found = Layout(common, lines[1])
    if len(_layouts) > 256:
        _layouts.clear()
    _layouts[key] = found
    return found


def write_object(repo: str | Path, kind: str, content: bytes) -> str:
    """Store an object (`blob`, `tree`, `commit`); its id. The same content is the same id."""
    where = layout(repo)
    data = f"{kind} {len(content)}\0".encode() + content
    oid = hashlib.new(where.algorithm, data).hexdigest()
    path = where.common_dir / "objects" / oid[:2] / oid[2:]
    if path.exists():
        try:  # as git does: an old unreachable copy is made young, so gc does not prune it under us
            os.utime(path)
        except OSError:
            pass
        return oid
    try:
        path.parent.mkdir(exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix="tmp_obj_")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(zlib.compress(data))
            os.chmod(temporary, 0o444)
            try:
                os.link(temporary, path)  # never replaces: an object that exists is kept as it is
            except FileExistsError:
                pass
        finally:
            os.unlink(temporary)
    except OSError as err:
        raise NotPlain(f"cannot write {path}: {err}") from None
    return oid


def tree_content(blobs: list[tuple[str, str]], trees: list[tuple[str, str]]) -> bytes:
    """A tree object's content: entries in git's order (a folder sorts as if its name ended in '/')."""
    entries = [(name, b"100644", oid) for name, oid in blobs] + [(name + "/", b"40000", oid) for name, oid in trees]
    out = bytearray()
    for name, mode, oid in sorted(entries, key=lambda entry: entry[0].encode()):
        if not name.rstrip("/") or "/" in name.rstrip("/") or "\0" in name:
            raise NotPlain(f"not a plain tree entry name: {name!r}")
        out += mode + b" " + name.rstrip("/").encode() + b"\0" + bytes.fromhex(oid)
    return bytes(out)


def commit_content(tree: str, parent: str | None, message: str, name: str, email: str) -> bytes:
    """A commit object's content, as `git commit-tree -m message` with that author and committer."""
    stamp = f"{name} <{email}> {int(time.time())} +0000"
    head = f"tree {tree}\n" + (f"parent {parent}\n" if parent else "") + f"author {stamp}\ncommitter {stamp}\n"
    return (head + "\n" + message.rstrip("\n") + "\n").encode()


def _ref_path(repo: str | Path, ref: str) -> Path:
    if not ref.startswith("refs/") or ".." in ref or ref.endswith((".lock", "/")) or "//" in ref:
        raise NotPlain(f"not a plain ref name: {ref!r}")
    return layout(repo).common_dir.joinpath(*ref.split("/"))


def read_ref(repo: str | Path, ref: str) -> str | None:
    """A ref's value from its loose file or `packed-refs`; None when it does not exist."""
    path = _ref_path(repo, ref)
    try:
        value = path.read_text().strip()
    except FileNotFoundError:
        return _packed(layout(repo).common_dir, ref)
    except (IsADirectoryError, NotADirectoryError):
        return None  # a folder of refs, or under a ref of a shorter name: no ref of this name
    except OSError as err:
        raise NotPlain(f"{path}: {err}") from None
    if value.startswith("ref:"):
        raise NotPlain(f"{ref} is a symbolic ref")
    return value or None


def _packed_refs(common: Path) -> list[tuple[str, str]]:
    """(object id, ref name) of every ref in `packed-refs` (peeled lines and comments skipped)."""
    try:
        text = (common / "packed-refs").read_text()
    except FileNotFoundError:
        return []
    except OSError as err:
        raise NotPlain(f"packed-refs: {err}") from None
    return [(oid, name.strip()) for oid, _, name in (line.partition(" ") for line in text.splitlines())
            if name and not oid.startswith(("#", "^"))]


def _packed(common: Path, ref: str) -> str | None:
    return next((oid for oid, name in _packed_refs(common) if name == ref), None)


def packed_conflict(common: Path, ref: str) -> str:
    """A packed ref whose name is a folder of `ref` or inside it (`refs/heads/task` against a
    packed `refs/heads/task/a`, or the reverse), or "": git refuses to create such a pair, and
    once both exist the clone can be neither cloned nor pushed whole."""
    return next((name for _, name in _packed_refs(common)
                 if name.startswith(ref + "/") or ref.startswith(name + "/")), "")


def ready_ref_path(root: Path, path: Path) -> None:
    """Make the folders of ref file `path` under `root`; NotPlain when a ref of a shorter name is in
    the way (`task/x` cannot be written while a ref `task` exists) or `path` is a folder of refs."""
    for parent in path.parents:
        if parent == root:
            break
        if parent.exists() and not parent.is_dir():
            raise NotPlain(f"{parent} is a ref, not a folder")
    if path.is_dir():
        raise NotPlain(f"{path} is a folder of refs")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise NotPlain(f"{path.parent}: {err}") from None


def write_locked(path: Path, content: str, precondition: Callable[[], bool] | None = None) -> bool:
    """Replace `path` as git does: `<path>.lock` created exclusively, `precondition` checked under
    it, the content written, the lock renamed over `path`. False when another writer holds the
    lock or the precondition fails; NotPlain when the file system refuses."""
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        return False  # another writer is changing it
    except OSError as err:
        raise NotPlain(f"{lock}: {err}") from None
    renamed = False
    try:
        try:
            if precondition is not None and not precondition():
                return False
            os.write(fd, content.encode())
        finally:
            os.close(fd)
        os.rename(lock, path)
        renamed = True
        return True
    except OSError as err:
        raise NotPlain(f"{path}: {err}") from None
    finally:
        if not renamed:  # only our own lock: once renamed, a lock there is another writer's
            lock.unlink(missing_ok=True)


def update_ref(repo: str | Path, ref: str, new: str, old: str | None, check_old: bool = True) -> bool:
    """Point `ref` at `new` if it still points at `old` (None: only if it does not exist); with
    `check_old=False`, whatever it points at. False when it moved, or another writer holds its lock."""
    path = _ref_path(repo, ref)
    common = layout(repo).common_dir
    ready_ref_path(common, path)
    clash = packed_conflict(common, ref)
    if clash:
        raise NotPlain(f"{ref} conflicts with the packed ref {clash}")
    return write_locked(path, new + "\n", (lambda: read_ref(repo, ref) == old) if check_old else None)
