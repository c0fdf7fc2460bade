"""Validation of merge-queue entries and start input, in pure Python (the workflow runs it).

Anyone with the `temporal` CLI can send the queue anything; what reaches its state has passed here.
The activities check again against the real clone (the branch, its commit) before merging.
"""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Any

from taskfleet.core.bounded import json_size
from taskfleet.core.git_op_validation import branch_name_problem
from taskfleet.core.models.merge_queue import MergeQueueConfig, QueueEntry

# Fields the workflow sets itself: accepted in what a client sends (an entry read back from
# `status`, say), and ignored.
_SET_BY_QUEUE = {"enqueued_at", "verified_in", "split_in", "seq", "passed_alone"}
_ENTRY_FIELDS = {f.name for f in fields(QueueEntry)} - _SET_BY_QUEUE
_MAX_LENGTHS = {"id": 200, "branch": 255, "expect_commit": 40, "reply_to": 1000, "verify": 4096,
                "task_type": 200}
_SHA1_HEX = re.compile(r"[0-9a-f]{40}")
_REMOTE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_ENTRY_BYTES = 16 * 1024
MAX_BATCH_LIMIT = 1000
MAX_PARALLEL = 64
MAX_FLAKE_RETRIES = 5
MAX_RISK = 10
MAX_FILES, MAX_FILE_CHARS = 20, 300


class InvalidQueueEntry(ValueError):
    """The entry (or start input) can never be accepted as sent; the message says what to change."""


def parse_entry(raw: Any) -> QueueEntry:
    """A signal/update payload (a JSON object) as a `QueueEntry`, or `InvalidQueueEntry`."""
    if isinstance(raw, QueueEntry):
        raw = {name: getattr(raw, name) for name in _ENTRY_FIELDS}
    if not isinstance(raw, dict):
        raise InvalidQueueEntry(f"an entry must be a JSON object, got {type(raw).__name__}")
    unknown = [str(name) for name in raw if name not in _ENTRY_FIELDS and name not in _SET_BY_QUEUE]
    if unknown:
        shown = ", ".join(n if len(n) <= 40 else f"{n[:40]}…" for n in sorted(unknown[:100])[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise InvalidQueueEntry(f"unknown field(s) {shown}{more}; allowed: {sorted(_ENTRY_FIELDS)}")
    for name, limit in _MAX_LENGTHS.items():
        value = raw.get(name)
        if value is not None and not isinstance(value, str):
            raise InvalidQueueEntry(f"field {name!r} must be a string")
        if len(value or "") > limit:
            raise InvalidQueueEntry(f"field {name!r} is longer than {limit} characters")
    if not raw.get("branch"):
        raise InvalidQueueEntry("missing field 'branch' (the branch to land, as the clone has it)")
    problem = branch_name_problem(raw["branch"])
    if problem:
        raise InvalidQueueEntry(problem)
    commit = raw.get("expect_commit") or ""
    if not commit:
        raise InvalidQueueEntry(
            "missing field 'expect_commit': the branch's commit you mean to land (40 hex; "
            "`git rev-parse BRANCH`, or `taskfleet queue add` fills it in)"
        )
    if not _SHA1_HEX.fullmatch(commit):
        raise InvalidQueueEntry(
            "field 'expect_commit' must be a full 40-hex commit id (lower case)")
    verify = raw.get("verify") or ""
    if verify and not verify.strip():
        raise InvalidQueueEntry(
            "field 'verify' is blank; leave it out to use the queue's verify command")
    if "\x00" in verify:
        raise InvalidQueueEntry("field 'verify' contains a NUL byte")
    risk, files = raw.get("risk") or 0, raw.get("files") or []
    if not _whole(risk) or not 0 <= risk <= MAX_RISK:
        raise InvalidQueueEntry(f"field 'risk' must be a whole number from 0 to {MAX_RISK}")
    if (not isinstance(files, list) or len(files) > MAX_FILES
            or not all(isinstance(f, str) and 0 < len(f) <= MAX_FILE_CHARS for f in files)):
        raise InvalidQueueEntry(f"field 'files' must be a list of at most {MAX_FILES} paths "
                                f"(each at most {MAX_FILE_CHARS} characters)")
    entry = QueueEntry(branch=raw["branch"], expect_commit=commit, id=raw.get("id") or "",
                       reply_to=raw.get("reply_to") or "", verify=verify,
                       task_type=raw.get("task_type") or "", risk=risk, files=list(files))
    size = json_size(entry)
    if size > MAX_ENTRY_BYTES:
        raise InvalidQueueEntry(
            f"entry is {size // 1024} KiB as JSON; the limit is {MAX_ENTRY_BYTES // 1024} KiB")
    return entry


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_queue_config(raw: Any) -> MergeQueueConfig:
    """Validate the start input; a bad one fails the start with a message instead of looping."""
    if isinstance(raw, MergeQueueConfig):
        config = raw
    elif isinstance(raw, dict):
        known = {f.name for f in fields(MergeQueueConfig)}
        unknown = sorted(str(k) for k in set(raw) - known)
        if unknown:
            raise InvalidQueueEntry(
                f"unknown start field(s) {', '.join(unknown[:5])}; allowed: {sorted(known)}")
        for name in ("repo", "target"):
            if not raw.get(name):
                raise InvalidQueueEntry(f"start input needs '{name}'")
        try:
            config = MergeQueueConfig(**raw)
        except TypeError as err:
            raise InvalidQueueEntry(f"bad start input: {err}") from None
    else:
        raise InvalidQueueEntry(
            "start input must be a JSON object with at least 'repo' and 'target'")
    if not isinstance(config.repo, str) or not config.repo.startswith("/"):
        raise InvalidQueueEntry(f"repo {config.repo!r} must be an absolute path on the worker")
    if not isinstance(config.remote, str) or not _REMOTE.fullmatch(config.remote):
        raise InvalidQueueEntry(f"remote {config.remote!r} is not a valid remote name")
    problem = branch_name_problem(config.target)
    if problem:
        raise InvalidQueueEntry(f"target: {problem}")
    if not isinstance(config.verify, str) or len(config.verify) > 4096 or "\x00" in config.verify:
        raise InvalidQueueEntry(
            "verify must be a command line (a string of at most 4096 characters)")
    problem = queue_numbers_problem(config.max_batch, config.max_wait_seconds)
    if problem:
        raise InvalidQueueEntry(problem)
    problem = speculation_problem(config.parallel, config.flake_retries)
    if problem:
        raise InvalidQueueEntry(problem)
    for name in ("verify_timeout_seconds", "heartbeat_timeout_seconds"):
        if not _number(getattr(config, name)) or getattr(config, name) <= 0:
            raise InvalidQueueEntry(f"{name} must be a number > 0")
    if not _whole(config.max_history_events) or config.max_history_events < 0:
        raise InvalidQueueEntry("max_history_events must be a whole number >= 0")
    return config


def queue_numbers_problem(max_batch: Any, max_wait_seconds: Any, prefix: str = "") -> str | None:
    """Why a batch size or wait is unusable (naming the key with `prefix`), or None."""
    if not _whole(max_batch) or not 1 <= max_batch <= MAX_BATCH_LIMIT:
        return (f"{prefix}max_batch must be a whole number from 1 to {MAX_BATCH_LIMIT}, "
                f"got {max_batch!r}")
    if not _number(max_wait_seconds) or max_wait_seconds <= 0:
        return f"{prefix}max_wait_seconds must be a number > 0, got {max_wait_seconds!r}"
    return None


def speculation_problem(parallel: Any, flake_retries: Any, prefix: str = "") -> str | None:
    """Why a number of parallel verify runs or of flake retries is unusable, or None."""
    if not _whole(parallel) or not 1 <= parallel <= MAX_PARALLEL:
        return f"{prefix}parallel must be a whole number from 1 to {MAX_PARALLEL}, got {parallel!r}"
    if not _whole(flake_retries) or not 0 <= flake_retries <= MAX_FLAKE_RETRIES:
        return (f"{prefix}flake_retries must be a whole number from 0 to {MAX_FLAKE_RETRIES}, "
                f"got {flake_retries!r}")
    return None


def queue_board_problem(settings: Any) -> str | None:
    """Why a board's `queue_*` keys cannot run (the key named), or None. `settings` is a `Board`."""
    problem = (
        queue_numbers_problem(settings.queue_max_batch, settings.queue_max_wait_seconds, "queue_")
        or speculation_problem(settings.queue_parallel, settings.queue_flake_retries, "queue_")
    )
    if problem:
        return problem
    if not _whole(settings.queue_retries) or not 0 <= settings.queue_retries <= 20:
        return f"queue_retries must be a whole number from 0 to 20, got {settings.queue_retries!r}"
    if not isinstance(settings.queue_verify, str) or len(settings.queue_verify) > 4096:
        return "queue_verify must be a command line (a string of at most 4096 characters)"
    if not isinstance(settings.queue_target, str):
        return "queue_target must be a branch name"
    if settings.queue_target:
        problem = branch_name_problem(settings.queue_target)
        if problem:
            return f"queue_target: {problem}"
    return None
