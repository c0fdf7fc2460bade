"""The payload store on a real folder and on a real S3 API server (moto's, started here): content
addressed, every read checked, and each failure one line naming the store and the key."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskfleet.activities.model_io.payload_s3 import S3Store
from taskfleet.activities.model_io.payload_store import (
    LocalStore,
    PayloadStore,
    PayloadStoreError,
    payload_store,
)
from taskfleet.core.models.payload import PayloadRef
from tests.conftest import free_port
from tests.s3_support import CREDENTIALS, s3_server


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Iterator:
    with s3_server(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path: Path) -> PayloadStore:
    if request.param == "local":
        return LocalStore(tmp_path / "payloads")
    request.getfixturevalue("s3")
    return S3Store(f"s3://payloads/{tmp_path.name}")


def test_the_key_is_the_checksum_and_the_same_bytes_are_one_payload(store: PayloadStore):
    data = b"Task id: L1\n" + b"x" * 200_000
    ref = store.put(data)
    assert ref == PayloadRef(key=hashlib.sha256(data).hexdigest(), size=len(data))
    assert store.put(data) == ref
    assert store.get(ref) == data
    assert store.prune(time.time() - 3600, dry_run=True)[2] == 1  # one object, kept


def test_a_missing_payload_names_the_store_and_the_key(store: PayloadStore):
    ref = PayloadRef(key="ab" * 32, size=3)
    with pytest.raises(PayloadStoreError) as caught:
        store.get(ref)
    assert caught.value.kind == "PayloadMissing" and not caught.value.retry
    assert ref.key in str(caught.value) and store.url in str(caught.value)
    good = store.put(b"good")
    found = store.get_many([ref, good])
    assert (
        isinstance(found[0], PayloadStoreError) and found[1] == b"good"
    )  # one bad read fails alone


def test_a_corrupted_payload_is_refused_naming_its_key(tmp_path: Path):
    store = LocalStore(tmp_path / "payloads")
    ref = store.put(b"the prompt")
    (tmp_path / "payloads" / ref.key[:2] / ref.key).write_bytes(b"the prompT")
    with pytest.raises(PayloadStoreError) as caught:
        store.get(ref)
    assert (
        caught.value.kind == "PayloadCorrupt"
        and ref.key in str(caught.value)
        and "SHA-256" in str(caught.value)
    )
    # stored again: healed
    assert store.put(b"the prompt") == ref and store.get(ref) == b"the prompt"


def test_storing_again_refreshes_its_age_and_prune_takes_only_the_old(tmp_path: Path):
    store = LocalStore(tmp_path / "payloads")
    old, again, new = store.put(b"old"), store.put(b"again"), store.put(b"new")
    month_ago = time.time() - 30 * 86_400
    for ref in (old, again):
        os.utime(tmp_path / "payloads" / ref.key[:2] / ref.key, (month_ago, month_ago))
    store.put(b"again")  # referred to once more: young again
    cutoff = time.time() - 7 * 86_400
    assert store.prune(cutoff, dry_run=True) == (1, 3, 2, 8)
    assert store.get(old) == b"old"  # a dry run removes nothing
    assert store.prune(cutoff) == (1, 3, 2, 8)
    with pytest.raises(PayloadStoreError):
        store.get(old)
    assert store.get(again) == b"again" and store.get(new) == b"new"


def test_s3_prune_goes_by_last_stored(s3, tmp_path: Path):
    store = S3Store(f"s3://payloads/{tmp_path.name}")
    ref = store.put(b"kept or not")
    assert store.prune(time.time() - 3600) == (0, 0, 1, 11)
    assert store.prune(time.time() + 3600) == (1, 11, 0, 0)
    with pytest.raises(PayloadStoreError):
        store.get(ref)


def test_an_unreachable_s3_store_is_retryable_and_named(monkeypatch):
    monkeypatch.setenv(
        "AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}"
    )  # nothing listens there
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    store = S3Store("s3://payloads/nowhere")
    with pytest.raises(PayloadStoreError) as caught:
        store.put(b"data")
    assert caught.value.kind == "PayloadStoreUnavailable" and caught.value.retry
    assert "s3://payloads/nowhere is unreachable" in str(caught.value)


def test_the_setting_names_a_folder_or_a_bucket(tmp_path: Path):
    default = payload_store("", tmp_path / "default")
    assert isinstance(default, LocalStore) and default.url == str(tmp_path / "default")
    assert payload_store(f"file://{tmp_path}/x", tmp_path).url == f"{tmp_path}/x"
    s3 = payload_store("s3://bucket/some/prefix/", tmp_path)
    assert isinstance(s3, S3Store) and (s3.bucket, s3.prefix) == ("bucket", "some/prefix/")
    with pytest.raises(ValueError, match="TASKFLEET_PAYLOAD_STORE='ftp://x'"):
        payload_store("ftp://x", tmp_path)
