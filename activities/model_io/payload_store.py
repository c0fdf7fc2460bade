"""The payload store: prompts, replies and edits kept out of workflow history, content-addressed.
A key is the SHA-256 of its bytes, checked on every read; the same bytes stored twice are one
object. Histories carry `PayloadRef`s only, so replay never reads the store. A local folder by
default, or S3-compatible storage (`s3://bucket/prefix`) that every worker of the queue sees."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from temporalio.exceptions import ApplicationError

from taskfleet.core.models.payload import PayloadRef


class PayloadStoreError(Exception):
    """A store failure, its message naming the store (and the key): `kind` is the error type the
    activity raises, `retry` whether trying again may help."""

    def __init__(self, message: str, kind: str = "PayloadStoreError", retry: bool = False) -> None:
        super().__init__(message)
        self.kind, self.retry = kind, retry

    def application_error(self) -> ApplicationError:
        return ApplicationError(str(self), type=self.kind, non_retryable=not self.retry)


def encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


class PayloadStore:
    """What every store does; a subclass moves the bytes (`_write`, `_read`, `_list`, `_delete`)."""

    url = ""

    def put(self, data: bytes) -> PayloadRef:
        """Store `data` (again: refreshes its age, so pruning keeps what is still referred to)."""
        key = hashlib.sha256(data).hexdigest()
        self._write(key, data)
        return PayloadRef(key=key, size=len(data))

    def get(self, ref: PayloadRef) -> bytes:
        data = self._read(ref.key)
        if hashlib.sha256(data).hexdigest() != ref.key:
            raise PayloadStoreError(f"payload {ref.key} in {self.url} is corrupted (its SHA-256 "
                                    f"does not match; {len(data)} bytes)", "PayloadCorrupt")
        return data

    def get_many(self, refs: list[PayloadRef]) -> list[bytes | PayloadStoreError]:
        """Each payload, or the error that kept it (one bad payload never fails the others)."""

        def one(ref: PayloadRef) -> bytes | PayloadStoreError:
            try:
                return self.get(ref)
            except PayloadStoreError as err:
                if err.retry:
                    raise
                return err

        with ThreadPoolExecutor(max_workers=self.readers) as pool:
            return list(pool.map(one, refs))

    def prune(self, before: float, dry_run: bool = False) -> tuple[int, int, int, int]:
        """Remove payloads last stored before `before` (epoch s): (removed, bytes, kept, bytes)."""
        gone = gone_bytes = kept = kept_bytes = 0
        old: list[str] = []
        for key, size, stored_at in self._list():
            if stored_at < before:
                gone, gone_bytes = gone + 1, gone_bytes + size
                old.append(key)
            else:
                kept, kept_bytes = kept + 1, kept_bytes + size
        if not dry_run and old:
            self._delete(old)
        return gone, gone_bytes, kept, kept_bytes

    readers = 4

    def _write(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def _read(self, key: str) -> bytes:
        raise NotImplementedError

    def _list(self) -> Any:
        raise NotImplementedError

    def _delete(self, keys: list[str]) -> None:
        raise NotImplementedError

    # --- for activities: off the event loop, JSON in and out, failures as ApplicationErrors -------

    async def put_json(self, value: Any) -> PayloadRef:
        return await self._call(self.put, encode(value))

    async def get_json(self, ref: PayloadRef) -> Any:
        return json.loads(await self._call(self.get, ref))

    async def _call(self, fn: Any, arg: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, arg)
        except PayloadStoreError as err:
            raise err.application_error() from None


class LocalStore(PayloadStore):
    """A folder (`<root>/<2 hex>/<key>`): one host, or pods sharing a file system."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = str(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / key

    def _write(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            if path.is_file() and path.stat().st_size == len(data):
                if hashlib.sha256(path.read_bytes()).hexdigest() == key:
                    os.utime(path)  # the same bytes: young again; a damaged copy is rewritten
                    return
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f".{key}.{os.getpid()}.{time.monotonic_ns()}")
            try:
                partial.write_bytes(data)
                os.replace(partial, path)  # atomic: a reader sees all of it or none
            finally:
                partial.unlink(missing_ok=True)
        except OSError as err:
            full = err.errno in (errno.ENOSPC, errno.EDQUOT)
            raise PayloadStoreError(
                f"payload store {self.url}: cannot store {key}: {err.strerror}",
                "PayloadStoreFull" if full else "PayloadStoreUnavailable", retry=not full) from None

    def _read(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise PayloadStoreError(
                f"payload {key} is not in the payload store {self.url} (pruned, "
                "or a worker with another TASKFLEET_PAYLOAD_STORE stored it)",
                "PayloadMissing") from None
        except OSError as err:
            raise PayloadStoreError(
                f"payload store {self.url}: cannot read {key}: {err.strerror}",
                "PayloadStoreUnavailable", retry=True) from None

    def _list(self) -> Any:
        for folder in self.root.glob("??"):
            for path in folder.iterdir():
                if not path.name.startswith("."):
                    stat = path.stat()
                    yield path.name, stat.st_size, stat.st_mtime

    def _delete(self, keys: list[str]) -> None:
        for key in keys:
            self._path(key).unlink(missing_ok=True)


def payload_store(url: str, default: Path) -> PayloadStore:
    """The store a setting names: "" (the default folder), a path, `file://PATH` or
    `s3://BUCKET/PREFIX`. Raises ValueError for anything else."""
    if url.startswith("s3://"):
        from taskfleet.activities.model_io.payload_s3 import S3Store

        return S3Store(url)
    if "://" in url and not url.startswith("file://"):
        raise ValueError(
            f"TASKFLEET_PAYLOAD_STORE={url!r}: give a folder, file://PATH or s3://BUCKET/PREFIX")
    path = url.removeprefix("file://") or str(default)
    return LocalStore(Path(os.path.abspath(os.path.expanduser(path))))
