"""A task's commit from the paths it changed, built in process (libgit2): no index, no git process,
no walk of the tree as `git add -A` does. Keeps what `add -A` does (ignored new files left out,
exec bits, symlinks, new folders); a checkout with content filters (LFS) is left to git.
`snapshot` runs right after the implementer, so what verification leaves behind never lands."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

from taskfleet.core.git_objects import GitStoreError, common_dir, open_repository


class CommitRefused(Exception):
    """The worktree cannot be committed as the task's work; the message says why, for a person."""


class NotKnown(Exception):
    """The changes cannot be committed from paths alone here; stage with git instead."""


def _clean(path: str) -> str | None:
    parts = [p for p in path.replace(os.sep, "/").split("/") if p and p != "."]
    if not parts or ".." in parts or ".git" in parts:
        return None
    return "/".join(parts)


def _filtered(repo: pygit2.Repository, tree: pygit2.Tree, paths: Iterable[str]) -> bool:
    """Whether content filters may apply (git runs them on `add`, libgit2 does not)."""
    texts = []
    for rel in [".gitattributes", *(p for p in paths if p.endswith(".gitattributes"))]:
        try:
            texts.append(Path(repo.workdir, rel).read_bytes())
        except OSError:
            pass
    try:
        texts.append(Path(common_dir(repo), "info", "attributes").read_bytes())
    except OSError:
        pass
    if any(b"filter" in text for text in texts):
        return True
    try:
        return (any(entry.name == ".gitattributes" for entry in tree)
                and b"filter" in tree[".gitattributes"].data)
    except (KeyError, AttributeError):
        return False


def _smudged(repo: pygit2.Repository, tree: pygit2.Tree) -> bool:
    """Whether git would change a file's bytes on checkout (line endings, ident, filters)."""
    if (_config(repo, "core.autocrlf").lower() == "true"
            or _config(repo, "core.eol").lower() == "crlf"):
        return True
    return _attributes_say(repo, tree, (b"filter", b"ident", b"eol", b"encoding"))


def _converted(repo: pygit2.Repository, tree: pygit2.Tree) -> bool:
    """Whether `git add` may change a file's bytes (line endings: autocrlf, `text` attributes)."""
    if _config(repo, "core.autocrlf").lower() in ("true", "input"):
        return True
    return _attributes_say(repo, tree, (b"filter", b"ident", b"eol", b"encoding", b"text", b"crlf"))


def _attributes_say(repo: pygit2.Repository, tree: pygit2.Tree, words: tuple[bytes, ...]) -> bool:
    texts = []
    try:
        texts.append(tree[".gitattributes"].data)
    except (KeyError, AttributeError):
        pass
    try:
        texts.append(Path(common_dir(repo), "info", "attributes").read_bytes())
    except OSError:
        pass
    return any(word in text for text in texts for word in words)


def _entry(tree: pygit2.Tree, path: str):
    try:
        return tree[path]
    except (KeyError, ValueError):
        return None


def _changes(repo: pygit2.Repository, base: pygit2.Tree,
             paths: Iterable[str]) -> dict[str, tuple | None]:
    """{path: (blob id, mode) or None (gone)} for the files at `paths` as they are on disk."""
    root = repo.workdir
    filemode = repo.config.get_bool("core.fileMode") if "core.fileMode" in repo.config else True
    # With no line-ending or text attributes a file's blob is its bytes: read directly, without
    # libgit2 loading the attributes for every file.
    raw = not _converted(repo, base)
    out: dict[str, tuple | None] = {}

    def add_file(rel: str, st: os.stat_result) -> None:
        if rel in out:
            return
        in_base = _entry(base, rel)
        if in_base is None and repo.path_is_ignored(rel):
            return  # as `git add -A`: an ignored new file is not added
        if stat.S_ISLNK(st.st_mode):
            out[rel] = (repo.create_blob(os.fsencode(os.readlink(os.path.join(root, rel)))),
                        FileMode.LINK)
            return
        if not stat.S_ISREG(st.st_mode):
            return
        if filemode:
            mode = FileMode.BLOB_EXECUTABLE if st.st_mode & stat.S_IXUSR else FileMode.BLOB
        else:
            mode = (FileMode(in_base.filemode) if in_base is not None and in_base.type_str == "blob"
                    else FileMode.BLOB)
        if raw:
            with open(os.path.join(root, rel), "rb") as file:
                out[rel] = (repo.create_blob(file.read()), mode)
        else:
            out[rel] = (repo.create_blob_fromworkdir(rel), mode)

    for raw in sorted(set(paths)):
        rel = _clean(raw)
        if rel is None:
            continue
        try:
            st = os.lstat(os.path.join(root, rel))
        except FileNotFoundError:
            out[rel] = None
            continue
        except NotADirectoryError:
            out[rel] = None
            continue
        if not stat.S_ISDIR(st.st_mode):
            add_file(rel, st)
            continue
        old = _entry(base, rel)
        if old is not None and old.type_str != "tree":
            out[rel] = None  # a file that became a folder: its files come next
        for folder, dirs, files in os.walk(os.path.join(root, rel)):
            if ".git" in dirs or ".git" in files:  # git records a nested repository as a whole
                raise NotKnown(
                    f"{os.path.relpath(folder, root)} is a nested repository: git stages")
            for name in files:
                child = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
                add_file(child, os.lstat(os.path.join(folder, name)))
            for name in list(dirs):  # a symlink to a folder is a link, not a folder to walk
                full = os.path.join(folder, name)
                if os.path.islink(full):
                    dirs.remove(name)
                    child = os.path.relpath(full, root).replace(os.sep, "/")
                    add_file(child, os.lstat(full))
    return out


def _edit(repo: pygit2.Repository, tree: pygit2.Tree | None,
          changes: dict[str, tuple | None]) -> pygit2.Oid | None:
    """`tree` with `changes` applied (paths relative to it); None when it ends up empty."""
    builder = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
    direct: dict[str, tuple | None] = {}
    nested: dict[str, dict[str, tuple | None]] = {}
    for path, change in changes.items():
        head, _, rest = path.partition("/")
        if rest:
            nested.setdefault(head, {})[rest] = change
        else:
            direct[head] = change
    for name, change in direct.items():
        if change is None:
            if builder.get(name) is not None:
                builder.remove(name)
        elif name not in nested:
            builder.insert(name, change[0], change[1])
    for name, sub in nested.items():
        current = builder.get(name)
        subtree = (repo[current.id] if current is not None and current.filemode == FileMode.TREE
                   else None)
        if direct.get(name, "kept") is None:
            subtree = None  # the folder (or the file of that name) went first
        oid = _edit(repo, subtree, sub)
        if oid is None:
            if builder.get(name) is not None:
                builder.remove(name)
        else:
            builder.insert(name, oid, FileMode.TREE)
    if len(builder) == 0:
        return None
    return builder.write()


def snapshot(worktree: Path, base_commit: str, paths: Iterable[str]) -> str:
    """The worktree's tree, given that only `paths` differ from `base_commit`; its objects are
    written, the index and files untouched. NotKnown when git must stage."""
    try:
        repo = open_repository(worktree)
    except GitStoreError as err:
        raise NotKnown(str(err)) from None
    base = repo[pygit2.Oid(hex=base_commit)].peel(pygit2.Tree)
    paths = list(paths)
    if _filtered(repo, base, paths):
        raise NotKnown("content filters apply (.gitattributes filter=): git stages")
    changes = _changes(repo, base, paths)
    if not changes:
        return str(base.id)
    oid = _edit(repo, base, changes)
    if oid is None:
        oid = repo.TreeBuilder().write()
    return str(oid)


def commit_tree(worktree: Path, branch: str, base_commit: str, tree: str, message: str) -> str:
    """Commit `tree` on `branch` over the base or the executor's commits (a HEAD lacking the base is
    refused). The branch moves by compare-and-swap: a concurrent writer wins."""
    repo = open_repository(worktree)
    ref = f"refs/heads/{branch}"
    parent = base_commit
    try:
        head = repo.head.peel(pygit2.Commit).id if not repo.head_is_unborn else None
    except (pygit2.GitError, KeyError):
        head = None
    if head is not None and str(head) != base_commit:
        if not repo.descendant_of(head, pygit2.Oid(hex=base_commit)):
            where = repo.head.shorthand if not repo.head_is_detached else "a detached HEAD"
            raise CommitRefused(
                f"the executor left the worktree on {where} at {str(head)[:12]}, which does not "
                f"contain the base {base_commit[:12]}; nothing was committed on {branch}")
        parent = str(head)
    author, committer = _identity(repo)
    commit = repo.create_commit(None, author, committer, message, pygit2.Oid(hex=tree),
                                [pygit2.Oid(hex=parent)])
    current = repo.references.get(ref)
    old = current.target if current is not None else None
    try:
        with repo.transaction() as txn:
            txn.lock_ref(ref)
            now = repo.references.get(ref)
            if (now.target if now is not None else None) != old:
                raise CommitRefused(
                    f"{branch} moved while the task's commit was made; nothing was committed")
            txn.set_target(ref, commit, message="taskfleet: task commit")
    except pygit2.GitError as err:
        raise CommitRefused(f"cannot move {branch} to the task's commit: {err}") from None
    return str(commit)


_FALLBACK = ("taskfleet", "taskfleet@localhost")


def _identity(repo: pygit2.Repository) -> tuple[pygit2.Signature, pygit2.Signature]:
    """Author and committer as `git commit` takes them (environment, then config), else taskfleet's
    own name, as a command task's commit does."""
    def one(kind: str) -> pygit2.Signature:
        name = os.environ.get(f"GIT_{kind}_NAME") or _config(repo, "user.name") or _FALLBACK[0]
        email = os.environ.get(f"GIT_{kind}_EMAIL") or _config(repo, "user.email") or _FALLBACK[1]
        return pygit2.Signature(name, email)
    return one("AUTHOR"), one("COMMITTER")


def _config(repo: pygit2.Repository, key: str) -> str:
    try:
        return repo.config[key]
    except (KeyError, pygit2.GitError):
        return ""


_UMASK = os.umask(0o022)
os.umask(_UMASK)


def restore_paths(worktree: Path, base_commit: str, paths: Iterable[str]) -> None:
    """Make `paths` what they are in `base_commit` again, visiting only them (the index is still the
    base's). NotKnown when the worktree cannot be read in process."""
    try:
        repo = open_repository(worktree)
    except GitStoreError as err:
        raise NotKnown(str(err)) from None
    base = repo[pygit2.Oid(hex=base_commit)].peel(pygit2.Tree)
    if _smudged(repo, base):
        raise NotKnown("checkout filters apply (eol, ident, filter=): git checks out")
    root = repo.workdir
    for rel in sorted({c for c in map(_clean, paths) if c is not None}):
        entry = _entry(base, rel)
        full = os.path.join(root, rel)
        if entry is None:
            _remove(full)
        elif entry.filemode == FileMode.TREE:
            _write_tree(repo, repo[entry.id], full)
        elif entry.filemode == FileMode.COMMIT:
            continue  # a submodule: its checkout is its own
        else:
            _write_blob(repo, entry, full)


def _remove(full: str) -> None:
    if os.path.isdir(full) and not os.path.islink(full):
        import shutil

        shutil.rmtree(full, ignore_errors=True)
    else:
        try:
            os.unlink(full)
        except FileNotFoundError:
            pass
        except NotADirectoryError:
            pass  # under a path that is now a file: that path is restored on its own


def _write_tree(repo: pygit2.Repository, tree: pygit2.Tree, full: str) -> None:
    if os.path.lexists(full) and (os.path.islink(full) or not os.path.isdir(full)):
        os.unlink(full)
    os.makedirs(full, exist_ok=True)
    for entry in tree:
        target = os.path.join(full, entry.name)
        if entry.filemode == FileMode.TREE:
            _write_tree(repo, repo[entry.id], target)
        elif entry.filemode != FileMode.COMMIT:
            _write_blob(repo, entry, target)


def _write_blob(repo: pygit2.Repository, entry, full: str) -> None:
    data = repo[entry.id].data
    if os.path.lexists(full):
        if os.path.isdir(full) and not os.path.islink(full):
            _remove(full)
        elif entry.filemode == FileMode.LINK or os.path.islink(full):
            os.unlink(full)
    else:
        parent = os.path.dirname(full)
        if os.path.lexists(parent) and not os.path.isdir(parent):
            os.unlink(parent)
        os.makedirs(parent, exist_ok=True)
    if entry.filemode == FileMode.LINK:
        os.symlink(os.fsdecode(data), full)
        return
    with open(full, "wb") as out:
        out.write(data)
    os.chmod(full, (0o777 if entry.filemode == FileMode.BLOB_EXECUTABLE else 0o666) & ~_UMASK)
