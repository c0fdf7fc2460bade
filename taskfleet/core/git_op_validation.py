"""Validation of git ops that arrive by signal or update, in pure Python: workflow code may not run
`git check-ref-format`, so its rules are restated here (the push activity checks the repository)."""

from __future__ import annotations

import posixpath
import re
from dataclasses import fields
from typing import Any

from taskfleet.core.bounded import json_size
from taskfleet.core.models.git_batch import OP_TYPES, GitBatchConfig, GitOp

_FORBIDDEN_REF_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
_OP_FIELDS = {f.name for f in fields(GitOp)} - {"enqueued_at"}
_MAX_MESSAGE = 64 * 1024
_MAX_FILES = 10_000
# One op as JSON (all fields): bounds what a queued op costs the batcher's carried state.
MAX_OP_BYTES = 64 * 1024
_MAX_LENGTHS = {"id": 200, "branch": 255, "target": 255, "worktree": 4096, "reply_to": 1000,
                "expect_commit": 40}
_SHA1_HEX = re.compile(r"[0-9a-f]{40}")


class InvalidGitOp(ValueError):
    """The op can never succeed as sent; the message says what to change."""


def branch_name_problem(name: Any) -> str | None:
    """Why `git check-ref-format --branch` (or git's option parser) would refuse `name`, or None."""
    if not isinstance(name, str) or not name:
        return "branch name is empty"
    if len(name) > 255:
        return "branch name is longer than 255 characters"
    if name.startswith("-"):
        return f"branch name {name!r} starts with '-'"
    if name == "@" or name == "HEAD":
        return f"branch name {name!r} is reserved"
    if _FORBIDDEN_REF_CHARS.search(name):
        return f"branch name {name!r} contains a space, control character or one of ~^:?*[\\"
    if ".." in name or "@{" in name or "//" in name:
        return f"branch name {name!r} contains '..', '@{{' or '//'"
    if name.startswith("/") or name.endswith("/") or name.endswith("."):
        return f"branch name {name!r} starts or ends with '/' or ends with '.'"
    for part in name.split("/"):
        if part.startswith(".") or part.endswith(".lock"):
            return f"branch name {name!r} has a component starting with '.' or ending with '.lock'"
    if len(name) > 255:
        return "branch name is longer than 255 characters"
    return None


def path_problem(path: Any) -> str | None:
    """Why a commit op's file path is unsafe (absolute, outside the worktree, an option)."""
    if not isinstance(path, str) or not path:
        return "file path is empty"
    if len(path) > 4096:
        return "file path is longer than 4096 characters"
    if "\x00" in path:
        return f"file path {path!r} contains a NUL byte"
    if path.startswith("/"):
        return f"file path {path!r} is absolute; give it relative to the worktree"
    normal = posixpath.normpath(path)
    if normal == ".." or normal.startswith("../"):
        return f"file path {path!r} is outside the repository"
    if normal.split("/")[0] == ".git":
        return f"file path {path!r} is inside .git"
    if path.startswith("-"):
        return f"file path {path!r} starts with '-'"
    return None


def parse_git_op(raw: Any) -> GitOp:
    """Turn a signal/update payload (a JSON object) into a `GitOp`, or raise `InvalidGitOp`."""
    if isinstance(raw, GitOp):
        raw = {f: getattr(raw, f) for f in _OP_FIELDS}
    if not isinstance(raw, dict):
        raise InvalidGitOp(f"a git op must be a JSON object, got {type(raw).__name__}")
    unknown = [str(name) for name in raw if name not in _OP_FIELDS and name != "enqueued_at"]
    if unknown:
        shown = ", ".join(name if len(name) <= 40 else f"{name[:40]}…"
                          for name in sorted(unknown[:100])[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise InvalidGitOp(f"unknown field(s) {shown}{more}; allowed: {sorted(_OP_FIELDS)}")
    for name in ("id", "op_type", "branch", "message", "worktree", "target", "reply_to",
                 "expect_commit"):
        if name in raw and raw[name] is not None and not isinstance(raw[name], str):
            raise InvalidGitOp(f"field {name!r} must be a string")
    for name, limit in _MAX_LENGTHS.items():
        if len(raw.get(name) or "") > limit:
            raise InvalidGitOp(f"field {name!r} is longer than {limit} characters")
    if len(raw.get("message") or "") > _MAX_MESSAGE:
        raise InvalidGitOp("message is longer than 64 KiB")
    op_type = raw.get("op_type") or ""
    if op_type not in OP_TYPES:
        raise InvalidGitOp(
            f"op_type {op_type!r} is not one of {', '.join(OP_TYPES)}"
            if op_type
            else "missing field 'op_type' (commit, push or merge)"
        )
    if not raw.get("branch"):
        raise InvalidGitOp("missing field 'branch'")
    if not isinstance(raw.get("force", False), bool):
        raise InvalidGitOp("field 'force' must be true or false")
    files = raw.get("files") or []
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise InvalidGitOp("field 'files' must be a list of paths")
    op = GitOp(
        op_type=op_type,
        branch=raw["branch"],
        id=raw.get("id") or "",
        message=raw.get("message") or "",
        files=list(files),
        worktree=raw.get("worktree") or "",
        target=raw.get("target") or "",
        reply_to=raw.get("reply_to") or "",
        force=bool(raw.get("force", False)),
        expect_commit=raw.get("expect_commit") or "",
    )
    problem = branch_name_problem(op.branch)
    if problem:
        raise InvalidGitOp(problem)
    if op.target:
        problem = branch_name_problem(op.target)
        if problem:
            raise InvalidGitOp(f"target: {problem}")
    if op.op_type == "commit":
        if not op.message.strip():
            raise InvalidGitOp("a commit op needs a non-empty 'message'")
        if not op.worktree:
            raise InvalidGitOp("a commit op needs 'worktree' (where the changes are)")
    if op.expect_commit and not _SHA1_HEX.fullmatch(op.expect_commit):
        raise InvalidGitOp(
            "field 'expect_commit' must be a full 40-hex commit id (lower case) or empty")
    if op.expect_commit and op.op_type == "commit":
        raise InvalidGitOp("'expect_commit' applies to push and merge ops only")
    if op.force and op.op_type != "push":
        raise InvalidGitOp("'force' applies to push ops only")
    if op.op_type == "merge" and op.target == op.branch:
        raise InvalidGitOp(f"cannot merge branch {op.branch!r} into itself")
    if op.worktree and not op.worktree.startswith("/"):
        raise InvalidGitOp(f"worktree {op.worktree!r} must be an absolute path on the worker")
    if len(op.message) > _MAX_MESSAGE:
        raise InvalidGitOp("message is longer than 64 KiB")
    if len(op.files) > _MAX_FILES:
        raise InvalidGitOp(f"more than {_MAX_FILES} files in one op")
    for path in op.files:
        problem = path_problem(path)
        if problem:
            raise InvalidGitOp(problem)
    size = json_size(op)
    if size > MAX_OP_BYTES:
        raise InvalidGitOp(
            f"op is {size // 1024} KiB as JSON; the limit is {MAX_OP_BYTES // 1024} KiB")
    return op


def parse_config(raw: Any) -> GitBatchConfig:
    """Validate the start input; a bad one fails the start with a message instead of looping."""
    if isinstance(raw, GitBatchConfig):
        config = raw
    elif isinstance(raw, dict):
        known = {f.name for f in fields(GitBatchConfig)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InvalidGitOp(
                f"unknown start field(s) {', '.join(unknown)}; allowed: {sorted(known)}")
        if not raw.get("repo"):
            raise InvalidGitOp("start input needs 'repo' (path of the clone on the worker)")
        try:
            config = GitBatchConfig(**raw)
        except TypeError as err:
            raise InvalidGitOp(f"bad start input: {err}") from None
    else:
        raise InvalidGitOp("start input must be a JSON object with at least 'repo'")
    if not isinstance(config.repo, str) or not config.repo.startswith("/"):
        raise InvalidGitOp(f"repo {config.repo!r} must be an absolute path on the worker")
    if (not isinstance(config.remote, str)
            or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", config.remote)):
        raise InvalidGitOp(f"remote {config.remote!r} is not a valid remote name")
    if not isinstance(config.max_batch_size, int) or config.max_batch_size < 1:
        raise InvalidGitOp("max_batch_size must be a whole number >= 1")
    if (not isinstance(config.max_batch_age_seconds, (int, float))
            or config.max_batch_age_seconds <= 0):
        raise InvalidGitOp("max_batch_age_seconds must be > 0")
    return config
