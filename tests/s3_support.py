"""A real S3 API server for tests: moto's standalone server in its own process, on a free port, and
the environment a worker or boto3 needs to reach it (endpoint, region, throwaway credentials)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import free_port

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class S3Server:
    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.out = open(log, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self.out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:  # a condition, not a sleep: the server answers once it listens
            try:
                urllib.request.urlopen(self.url, timeout=2).close()
                break
            except OSError:
                assert self.proc.poll() is None, log.read_text()[-2000:]
                assert time.monotonic() < deadline, "moto's S3 server did not start in 60 s"
                time.sleep(0.1)

    def env(self) -> dict[str, str]:
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.url}

    def client(self):
        import boto3

        return boto3.session.Session(
            **{
                "aws_access_key_id": "testing",
                "aws_secret_access_key": "testing",
                "region_name": "us-east-1",
            }
        ).client("s3", endpoint_url=self.url)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.out.close()


@contextmanager
def s3_server(tmp: Path, bucket: str = "payloads") -> Iterator[S3Server]:
    """The server with `bucket` made, and this process's environment pointing at it meanwhile."""
    server = S3Server(tmp / "moto.log")
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    try:
        server.client().create_bucket(Bucket=bucket)
        yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()
