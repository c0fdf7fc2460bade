"""The payload store on S3-compatible object storage (`s3://BUCKET/PREFIX`), through boto3.
Endpoint, region and credentials come from the standard AWS settings, so any S3 API works; boto3
is imported on first use, so a worker that stores no payload never pays for it."""

from __future__ import annotations

import importlib.util
import threading
from datetime import datetime
from typing import Any
from urllib.parse import urlparse

from taskfleet.activities.model_io.payload_store import PayloadStore, PayloadStoreError

RETRYABLE_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
                   "InternalError", "ServiceUnavailable", "RequestTimeTooSkewed"}


class S3Store(PayloadStore):
    readers = 16  # S3 reads are round trips: a batch's payloads are fetched this many at a time

    def __init__(self, url: str) -> None:
        parsed = urlparse(url)
        if not parsed.netloc:
            raise ValueError(f"TASKFLEET_PAYLOAD_STORE={url!r}: give s3://BUCKET/PREFIX")
        if importlib.util.find_spec("boto3") is None:
            raise ValueError(
                f"TASKFLEET_PAYLOAD_STORE={url!r} needs boto3: pip install 'taskfleet[s3]'")
        self.url, self.bucket = url.rstrip("/"), parsed.netloc
        self.prefix = parsed.path.strip("/") + "/" if parsed.path.strip("/") else ""
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        """One boto3 client (thread-safe) per store, made on first use; boto3 retries throttles."""
        with self._lock:
            if self._client is None:
                import boto3
                from botocore.config import Config

                config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5,
                                read_timeout=60, max_pool_connections=self.readers + 4)
                self._client = boto3.session.Session().client("s3", config=config)
            return self._client

    def _key(self, key: str) -> str:
        return f"{self.prefix}{key[:2]}/{key}"

    def _failure(self, err: Exception, what: str, key: str = "") -> PayloadStoreError:
        """A boto3 failure as a store error: a missing key, a retryable outage, or a refusal."""
        from botocore.exceptions import BotoCoreError, ClientError

        where = f"payload store {self.url}"
        if isinstance(err, ClientError):
            code = str(err.response.get("Error", {}).get("Code", ""))
            status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            if code in ("NoSuchKey", "404", "NotFound"):
                return PayloadStoreError(f"payload {key} is not in the {where} (pruned, or a "
                                         "worker with another TASKFLEET_PAYLOAD_STORE stored it)",
                                         "PayloadMissing")
            retry = status >= 500 or code in RETRYABLE_CODES
            kind = "PayloadStoreUnavailable" if retry else "PayloadStoreRefused"
            return PayloadStoreError(f"{where}: {what} {key}: {code or status} "
                                     f"{err.response.get('Error', {}).get('Message', '')}".strip(),
                                     kind, retry=retry)
        if isinstance(err, BotoCoreError):
            return PayloadStoreError(f"{where} is unreachable: {what} {key}: {err}"[:500],
                                     "PayloadStoreUnavailable", retry=True)
        return PayloadStoreError(f"{where}: {what} {key}: {type(err).__name__}: {err}"[:500],
                                 "PayloadStoreUnavailable", retry=True)

    def _write(self, key: str, data: bytes) -> None:
        # Always a PUT, even for a key already there: its new LastModified keeps it from pruning.
        try:
            self.client().put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        except Exception as err:  # noqa: BLE001 - any boto3 failure: one line naming the store
            raise self._failure(err, "cannot store", key) from None

    def _read(self, key: str) -> bytes:
        try:
            return self.client().get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except Exception as err:  # noqa: BLE001
            raise self._failure(err, "cannot read", key) from None

    def _list(self) -> Any:
        try:
            pages = self.client().get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix)
            for page in pages:
                for item in page.get("Contents", []):
                    modified: datetime = item["LastModified"]
                    yield item["Key"], int(item["Size"]), modified.timestamp()
        except Exception as err:  # noqa: BLE001
            raise self._failure(err, "cannot list") from None

    def _delete(self, keys: list[str]) -> None:
        try:
            for start in range(0, len(keys), 1000):  # the API's limit per call
                objects = [{"Key": key} for key in keys[start : start + 1000]]
                self.client().delete_objects(Bucket=self.bucket, Delete={"Objects": objects})
        except Exception as err:  # noqa: BLE001
            raise self._failure(err, "cannot delete") from None
