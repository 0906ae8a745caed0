"""A real MinIO server on loopback for the S3 staging tests.

The binary comes from hack/build-minio.sh (the pinned Go module, cached in
${SWITCHYARD_CACHE:-~/.cache/switchyard}/bin). Each server gets free ports on
127.0.0.1 and a data directory of its own; its root credentials come from
MINIO_ROOT_USER / MINIO_ROOT_PASSWORD when the environment sets them, and are
random otherwise. Commands are argument lists: nothing reaches a shell.

Fixtures (import them into a test module): `minio` (one server per session)
and `minio_private` (a server of the test's own, which the test may stop and
start again).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import botocore.config
import botocore.handlers
import pytest

from switchyard.s3 import S3, Credentials, Endpoint

CACHE = Path(os.environ.get("SWITCHYARD_CACHE", Path.home() / ".cache" / "switchyard"))
START_TIMEOUT = 60.0


def minio_binary() -> str:
    """The MinIO binary, or skip (fail in CI) with how to build it."""
    for candidate in (os.environ.get("SWITCHYARD_MINIO"), str(CACHE / "bin" / "minio"), shutil.which("minio")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    message = "MinIO is missing: run hack/build-minio.sh"
    pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
    raise AssertionError("unreachable")  # pragma: no cover


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def bucket_name(prefix: str = "t") -> str:
    """A fresh bucket name, so tests sharing a server never see each other's buckets."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class MinioServer:
    """One `minio server` process; stop() and start() keep its port and data."""

    def __init__(self, binary: str, root: Path):
        self.binary, self.root = binary, root
        self.data = root / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.log_path = root / "minio.log"
        self.port, self.console_port = free_port(), free_port()
        self.user = os.environ.get("MINIO_ROOT_USER") or "sy" + secrets.token_hex(8)
        self.password = os.environ.get("MINIO_ROOT_PASSWORD") or secrets.token_urlsafe(24)
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def credentials(self) -> Credentials:
        return Credentials(self.user, self.password)

    def start(self) -> "MinioServer":
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.root),
               "MINIO_ROOT_USER": self.user, "MINIO_ROOT_PASSWORD": self.password,
               "MINIO_BROWSER": "off", "MINIO_UPDATE": "off"}
        with self.log_path.open("a") as log:
            self.proc = subprocess.Popen(
                [self.binary, "server", str(self.data), "--address", f"127.0.0.1:{self.port}",
                 "--console-address", f"127.0.0.1:{self.console_port}", "--quiet"],
                stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"minio exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/minio/health/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"minio did not become ready in {START_TIMEOUT:.0f}s: {self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    # ------------------------------------------------------------ clients
    def s3(self, **endpoint) -> S3:
        """switchyard's own client for this server."""
        return S3(Endpoint(self.url, **endpoint), self.credentials)

    def boto(self):
        """A plain boto3 client, for what the tests do as a user would (uploads)."""
        client = boto3.client("s3", endpoint_url=self.url, region_name="us-east-1", aws_access_key_id=self.user,
                            aws_secret_access_key=self.password,
                            config=botocore.config.Config(max_pool_connections=32, retries={"max_attempts": 5},
                                                          request_checksum_calculation="when_required",
                                                          s3={"addressing_style": "path"}))
        # Tiny uploads need no "Expect: 100-continue"; with it, urllib3 2.x logs a
        # header-parsing warning per concurrent PUT (the interim 100 response).
        client.meta.events.unregister("before-call.s3", botocore.handlers.add_expect_header)
        return client

    def upload(self, bucket: str, count: int, size_of=lambda i: i % 97, prefix: str = "obj", workers: int = 16) -> int:
        """Put `count` objects in parallel; returns their total size in bytes."""
        client = self.boto()

        def put(i: int) -> int:
            size = size_of(i)
            client.put_object(Bucket=bucket, Key=f"{prefix}/{i:06d}", Body=b"x" * size)
            return size

        with ThreadPoolExecutor(workers) as pool:
            return sum(pool.map(put, range(count)))


@pytest.fixture(scope="session")
def minio(tmp_path_factory) -> Iterator[MinioServer]:
    """One MinIO for the session; tests use buckets of their own (bucket_name())."""
    server = MinioServer(minio_binary(), tmp_path_factory.mktemp("minio")).start()
    yield server
    server.stop()


@pytest.fixture
def minio_private(tmp_path) -> Iterator[MinioServer]:
    """A MinIO of this test's own: stopping it disturbs no other test."""
    server = MinioServer(minio_binary(), tmp_path / "minio").start()
    yield server
    server.stop()
