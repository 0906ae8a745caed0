"""Real xrootd origins and caches on loopback, for the integration tests.

xrootd refuses to run as root, so when the tests run as root every daemon runs
as the unprivileged user hack/install-xrootd.sh creates (XROOTD_USER, default
'xrootd'), in directories that user owns. Every daemon gets free ports and its
own instance name, so tests can run side by side. Nothing reaches a shell:
every command is an argument list.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from switchyard.api.xcachepool import XCachePoolBody
from switchyard.xrootd import render_config
from switchyard.xrootd.config import directories_to_create
from switchyard.xrootd.monitoring import MalformedPacket, Summary, decode

XROOTD_USER = os.environ.get("XROOTD_USER", "xrootd")
START_TIMEOUT = 30.0


def require(*commands: str) -> None:
    """Skip when a real component is missing locally; in CI that is a failure."""
    missing = [c for c in commands if shutil.which(c) is None]
    if not missing:
        return
    message = f"missing {', '.join(missing)}: run hack/install-xrootd.sh"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port free on 127.0.0.1 right now (TCP by default, or SOCK_DGRAM)."""
    with socket.socket(socket.AF_INET, kind) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class Account:
    """Who the daemons run as: the xrootd user under root, else ourselves."""

    uid: int
    gid: int

    @classmethod
    def for_daemons(cls) -> "Account":
        if os.geteuid() != 0:
            return cls(os.getuid(), os.getgid())
        try:
            entry = pwd.getpwnam(XROOTD_USER)
        except KeyError:
            message = f"user {XROOTD_USER!r} is missing: run hack/install-xrootd.sh"
            pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
        return cls(entry.pw_uid, entry.pw_gid)

    def popen_kwargs(self) -> dict:
        if os.geteuid() != 0:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def own(self, path: Path) -> Path:
        if os.geteuid() == 0:
            os.chown(path, self.uid, self.gid)
        return path

    def make_dir(self, path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        return self.own(path)


def workspace(account: Account) -> Path:
    """A fresh directory the daemons can reach (pytest's tmp_path is root-only)."""
    base = Path(tempfile.mkdtemp(prefix="switchyard-xrd-"))
    base.chmod(0o755)
    return account.own(base)


class TmpfsUnavailable(RuntimeError):
    pass


def mount_tmpfs(path: Path, size_mib: int, account: Account) -> None:
    """A small real filesystem, so disk usage and water marks are the cache's own."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size_mib}m,mode=0750,uid={account.uid},gid={account.gid}"
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "switchyard-test", str(path)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise TmpfsUnavailable(result.stderr.strip() or "mount failed")


def unmount(path: Path) -> None:
    subprocess.run(["umount", str(path)], capture_output=True, check=False)


@dataclass
class XrootdDaemon:
    """One xrootd process started from a config file, stopped by its pid."""

    name: str
    config: Path
    port: int
    workdir: Path
    account: Account
    process: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        # With -n NAME, xrootd puts the log under <dir>/NAME/.
        return self.workdir / self.name / "xrootd.log"

    @property
    def url(self) -> str:
        return f"root://127.0.0.1:{self.port}/"

    def start(self, _segfault_retries: int = 1) -> "XrootdDaemon":
        stdout = open(self.workdir / f"{self.name}.stdout", "ab")  # noqa: SIM115 - closed by the child's exit
        self.process = subprocess.Popen(
            ["xrootd", "-c", str(self.config), "-l", str(self.workdir / "xrootd.log"), "-n", self.name],
            cwd=self.workdir, stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True,
            **self.account.popen_kwargs(),
        )
        stdout.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                # xrootd 5.5.3 (Debian) has been seen to segfault while starting, rarely and
                # outside our code; a second start is what an init system would do. Any
                # other exit, or a second crash, fails the test.
                if self.process.returncode == -signal.SIGSEGV and _segfault_retries > 0:
                    print(f"xrootd {self.name} crashed (SIGSEGV) while starting; starting it once more", file=sys.stderr)
                    return self.start(_segfault_retries - 1)
                raise RuntimeError(f"xrootd {self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"xrootd {self.name} did not listen on {self.port}:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.process is None:
            return
        terminate(self.process)
        # What xrootd leaves in /tmp under its -n name: its env file, and its admin path where the config
        # names none (the rendered cache config: a pod's /tmp goes with it). A start makes them again.
        Path(f"/tmp/xrootd.{self.name}.env").unlink(missing_ok=True)
        shutil.rmtree(Path("/tmp") / self.name, ignore_errors=True)

    def wait_for_log(self, text: str, timeout: float = 60) -> bool:
        """True once `text` appears in the log (plugins log after the port opens)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log_tail(200000):
                return True
            time.sleep(0.2)
        return False

    def thread_stacks(self) -> str:
        """Every thread's stack of this running xrootd (gdb) with its log, written to e2e-logs/xrootd: what a
        daemon that stopped reporting was doing. A note of why not, when it cannot be taken."""
        if self.process is None or self.process.poll() is not None or not shutil.which("gdb"):
            return "no thread stacks (xrootd not running, or no gdb)"
        try:
            taken = subprocess.run(["gdb", "-p", str(self.process.pid), "-batch", "-ex", "thread apply all bt"],
                                   capture_output=True, text=True, timeout=120, check=False)
        except subprocess.TimeoutExpired:
            return "no thread stacks (gdb timed out)"
        logs = Path(os.environ.get("SWITCHYARD_CACHE", Path.home() / ".cache" / "switchyard")) / "e2e-logs" / "xrootd"
        logs.mkdir(parents=True, exist_ok=True)   # the test's own tree is removed when it ends
        path = logs / f"{self.name}-{self.process.pid}-stacks.txt"
        path.write_text(taken.stdout + taken.stderr + "\n---- its log\n" + self.log_tail(20000))
        return f"its threads' stacks: {path}"

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


class SummaryListener:
    """Collects a daemon's xrd.report summaries on a loopback UDP port."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.latest: Summary | None = None
        self.packets = 0  # every datagram received, for the failure message
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                packet = self.socket.recv(65536)
            except TimeoutError:
                continue
            self.packets += 1
            try:
                decoded = decode(packet)
            except MalformedPacket:
                continue
            if isinstance(decoded, Summary):
                self.latest = decoded

    def bytes_sent_after(self, moment: float, timeout: float = 30.0) -> int:
        """link out from the first report made after `moment` (Unix time)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            latest = self.latest
            if latest is not None and latest.reported > moment:
                return latest.bytes_sent
            time.sleep(0.1)
        latest = self.latest
        raise AssertionError(f"no summary reported after {moment} within {timeout} s (on port {self.port}: "
                             f"{self.packets} packets; the latest summary made at {latest and latest.reported}, "
                             f"pid {latest and latest.pid}; listener alive: {self._thread.is_alive()})")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.socket.close()


@dataclass
class Origin:
    """A plain xrootd serving a directory, reporting its own bytes sent."""

    daemon: XrootdDaemon
    root: Path
    meter: SummaryListener

    def put(self, name: str, data: bytes) -> str:
        path = self.root / name
        for parent in reversed(path.relative_to(self.root).parents[:-1]):
            self.daemon.account.make_dir(self.root / parent)
        path.write_bytes(data)
        self.daemon.account.own(path)
        return "/" + name

    def bytes_sent_now(self) -> int:
        """Origin bytes sent, from a report made after this call (waits ~1 s)."""
        return self.meter.bytes_sent_after(time.time() + 0.001)


def start_origin(base: Path, account: Account, port: int | None = None) -> Origin:
    workdir = account.make_dir(base / "origin")
    root = account.make_dir(workdir / "data")
    admin = account.make_dir(workdir / "admin")
    meter = SummaryListener()
    port = port or free_port()
    config = workdir / "origin.cfg"
    config.write_text("\n".join([
        "all.export / r/o",
        f"oss.localroot {root}",
        f"xrd.port {port}",
        f"all.adminpath {admin}",
        f"all.pidpath {admin}",
        f"xrd.report 127.0.0.1:{meter.port} every 1s all",
        "",
    ]))
    account.own(config)
    daemon = XrootdDaemon(f"origin{port}", config, port, workdir, account)
    daemon.start()
    return Origin(daemon, root, meter)


@dataclass
class Cache:
    """A cache started from the config switchyard renders for `pool`."""

    daemon: XrootdDaemon
    pool: XCachePoolBody
    config_text: str
    exporter_port: int

    def url_for(self, lfn: str) -> str:
        return f"root://127.0.0.1:{self.daemon.port}/{lfn}"


def cache_pool(origin_port: int, data_paths: list[str], meta_path: str, **spec) -> XCachePoolBody:
    """A pool aimed at a loopback origin, on a free port; `spec` overrides fields (wire names)."""
    body = {
        "port": free_port(),
        "origin": {"host": "127.0.0.1", "port": origin_port},
        "storage": {"dataPaths": data_paths, "metaPath": meta_path},
        "pfc": {"ramGiB": 1, "blockSizeKiB": 256, "prefetchBlocks": 4, "purgeIntervalSeconds": 60},
        "resources": {"memory": "2Gi"},
    }
    for key, value in spec.items():
        body[key] = {**body[key], **value} if isinstance(body.get(key), dict) else value
    return XCachePoolBody.model_validate(body)


def start_cache(base: Path, account: Account, pool: XCachePoolBody, exporter_port: int | None = None,
                **render_options: str) -> Cache:
    """Render the pool's config (reporting every second) and start xrootd on it."""
    workdir = account.make_dir(base / f"cache{pool.port}")
    for path in directories_to_create(pool):
        account.make_dir(Path(path))
    exporter_port = exporter_port or free_port(socket.SOCK_DGRAM)
    text = render_config(pool, exporter_port=exporter_port, report_interval_seconds=1, **render_options)
    config = workdir / "xcache.cfg"
    config.write_text(text)
    account.own(config)
    daemon = XrootdDaemon(f"cache{pool.port}", config, pool.port, workdir, account)
    daemon.start()
    return Cache(daemon, pool, text, exporter_port)


def xrdcp(source: str, destination: Path, timeout: float = 120.0,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Copy with the real client; returns the finished process (never raises on failure)."""
    return subprocess.run(["xrdcp", "--force", "--nopbar", source, str(destination)],
                          capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, **(env or {})})


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.5, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@dataclass
class Exporter:
    """`switchyard exporter` as a subprocess, scraped over HTTP on loopback."""

    process: subprocess.Popen
    metrics_port: int
    log: Path
    extra: dict = field(default_factory=dict)
    address: str = "127.0.0.1"

    def scrape(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://{self.address}:{self.metrics_port}/metrics", timeout=5) as response:
            return response.read().decode()

    def stop(self) -> None:
        terminate(self.process)


def terminate(process: subprocess.Popen, grace: float = 10) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; returns once the process is gone."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def start_exporter(args: list[str], workdir: Path, env: dict[str, str] | None = None,
                   address: str = "127.0.0.1", port: int | None = None) -> Exporter:
    """`env`: added to this process's environment (a pod's NODE_NAME); `address` and `port`: where /metrics
    listens (default a free port on 127.0.0.1; a simulated pod's address and the sidecar's port to be read
    as the operator reads it)."""
    metrics_port = port or free_port()
    log = workdir / f"exporter{metrics_port}.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "switchyard.observe.exporter", *args,
             "--metrics-address", address, "--metrics-port", str(metrics_port)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **(env or {})},
        )
    exporter = Exporter(process, metrics_port, log, address=address)

    def serving() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"exporter exited with {process.returncode}: {log.read_text()}")
        try:
            exporter.scrape()
            return True
        except OSError:
            return False

    wait_until(serving, timeout=30, interval=0.2, what="the exporter's /metrics")
    return exporter
