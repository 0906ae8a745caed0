"""A real Prometheus (Debian's `prometheus`) on loopback with a temporary config.

Usage:
    with run_prometheus(["127.0.0.1:9933"], workdir) as prom:
        prom.wait_for(lambda: prom.query('up') , timeout=30)
        prom.query('sum(rate(switchyard_xcache_client_bytes_total[1m]))')

Every target is scraped each second under job "switchyard". The server and its
data directory live for the `with` block only.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xrootd_fixtures import terminate


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Prometheus:
    process: subprocess.Popen
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as response:
            return json.loads(response.read())

    def query(self, expression: str) -> list[dict]:
        """An instant query's result list; raises on a query error."""
        body = self._get("/api/v1/query", query=expression)
        if body.get("status") != "success":
            raise RuntimeError(f"query {expression!r} failed: {body}")
        return body["data"]["result"]

    def value(self, expression: str) -> float | None:
        """The single sample of an instant vector, None while there is none."""
        result = self.query(expression)
        if not result:
            return None
        if len(result) != 1:
            raise AssertionError(f"{expression!r} returned {len(result)} series, expected one")
        return float(result[0]["value"][1])

    def rules(self) -> list[dict]:
        """Every rule Prometheus loaded, with its health, last error and last evaluation."""
        return [rule for group in self._get("/api/v1/rules")["data"]["groups"] for rule in group["rules"]]

    def targets_up(self) -> bool:
        active = self._get("/api/v1/targets")["data"]["activeTargets"]
        return bool(active) and all(target["health"] == "up" for target in active)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log.read_text()[-2000:]}")
            if predicate():
                return
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@contextmanager
def run_prometheus(targets: list[str], workdir: Path | None = None,
                   scrape_configs: list[dict] | None = None, rule_files: list[Path] = ()) -> Iterator[Prometheus]:
    """Start Prometheus scraping `targets` (host:port) every second, or with `scrape_configs`
    as given (each job's interval defaults to the global 1 s), evaluating `rule_files` every
    second; stop it afterwards."""
    if shutil.which("prometheus") is None:
        raise RuntimeError("prometheus is not installed: run hack/install-xrootd.sh")
    base = Path(tempfile.mkdtemp(prefix="switchyard-prom-", dir=workdir))
    config = base / "prometheus.yml"
    config.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": scrape_configs or [{"job_name": "switchyard", "static_configs": [{"targets": targets}]}],
        "rule_files": [str(Path(f).resolve()) for f in rule_files],
    }))
    port = _free_port()
    log = base / "prometheus.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={base / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    prom = Prometheus(process, port, log)
    try:
        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as response:
                    return response.status == 200
            except OSError:
                return False

        prom.wait_for(ready, timeout=60, what="prometheus to be ready")
        yield prom
    finally:
        terminate(process, grace=15)
        shutil.rmtree(base, ignore_errors=True)
