"""A ring of real caches in front of a real origin, and Dask processes started from generated pods.

Shared by the routing tests (test_routing_xrootd.py, test_analysis_read.py).
Caches listen on distinct loopback addresses (127.0.0.2, .3, ...): distinct
names for the rendezvous rule, which hashes the cache's name. What each cache
sent is read by a meter: the kernel's count of its port's bytes (KernelMeter),
or the exporter sidecar of its pod (ExporterMeter).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from xrootd_fixtures import (
    Exporter, cache_pool, free_port, start_cache, start_exporter, start_origin, wait_until,
)

from switchyard.api.xcachepool import XCachePoolBody, XCachePoolSpec
from switchyard.builders.xcachepool import build_statefulset
from switchyard.planner import hashing

# A cache that serves nothing of a read sends nothing for it: no client connects to
# it. A file (>= 1 MiB) read from a cache other than its home shows far above this.
NOT_SERVED = 4096

# The kubelet's ConfigMap volume (its atomic `..data` swap), written once for the unit tests.
sys.path.append(str(Path(__file__).resolve().parents[1] / "unit"))
from test_routing_ring_file import KubeletVolume  # noqa: E402,F401 - for the routing tests


@dataclass
class RingCache:
    name: str  # the cache's name in the ring (its host), what the rule hashes
    cache: object
    meter: object  # .bytes_sent_after(moment) and .close() (.describe(): an ExporterMeter): KernelMeter or ExporterMeter
    namespace: Path

    @property
    def url(self) -> str:
        return f"root://{self.name}:{self.cache.daemon.port}"

    @property
    def address(self) -> str:
        return f"{self.name}:{self.cache.daemon.port}"

    def holds(self, lfn: str) -> bool:
        return os.path.lexists(self.namespace / lfn.lstrip("/"))


def sent(caches: list[RingCache]) -> dict[str, int]:
    """Each cache's own count of bytes sent to clients, from reports made after this call."""
    moment = time.time() + 0.001
    counts = {}
    for c in caches:
        try:
            counts[c.name] = c.meter.bytes_sent_after(moment)
        except AssertionError as error:
            daemon = c.cache.daemon
            raise AssertionError(f"cache {c.name}: {error}; its xrootd's exit code: {daemon.process.poll()}, "
                                 f"{daemon.thread_stacks()}; its log ends:\n{daemon.log_tail(1500)}"
                                 f"{getattr(c.meter, 'describe', str)()}") from None
    return counts


def served(caches: list[RingCache], read) -> dict[str, int]:
    """Bytes each cache sent while `read()` ran."""
    before = sent(caches)
    read()
    after = sent(caches)
    return {name: after[name] - before[name] for name in before}


class KernelMeter:
    """Bytes a cache sent to its clients as the kernel counted them: a counting rule (no target) on OUTPUT for
    TCP from the cache's port, every byte that left it (with TCP/IP headers, a few hundred bytes a read).

    Not xrootd's own xrd.report link counter: an xrootd 5.5.3 of the ring has stopped its summaries for good
    (every thread idle, its report job never run again; the stacks in e2e-logs/xrootd), and nothing read
    through it could then be told apart. Its reports go to a UDP port nothing reads (`.port`).
    """

    def __init__(self, cache_port: int) -> None:
        self.port = free_port(socket.SOCK_DGRAM)
        self.comment = f"switchyard-ring-{os.getpid()}-{cache_port}"
        self.rule = ["OUTPUT", "-p", "tcp", "--sport", str(cache_port), "-m", "comment", "--comment", self.comment]
        subprocess.run(["iptables", "-w", "-I", *self.rule], check=True, capture_output=True)

    def bytes_sent_after(self, moment: float) -> int:  # noqa: ARG002 - the meters' interface: counted at once
        table = subprocess.run(["iptables", "-w", "-L", "OUTPUT", "-v", "-x", "-n"], check=True, capture_output=True,
                               text=True).stdout
        line = next((line for line in table.splitlines() if f"/* {self.comment} */" in line), None)
        if line is None:
            raise AssertionError(f"no counting rule {self.comment} on OUTPUT")
        return int(line.split()[1])

    def close(self) -> None:
        subprocess.run(["iptables", "-w", "-D", *self.rule], capture_output=True, check=False)


def kernel_meter(name: str, pool) -> KernelMeter:  # noqa: ARG001 - the meter factory's interface
    return KernelMeter(pool.port)


@contextlib.contextmanager
def running_ring(xrd_base, xrootd_account, count: int, meter: Callable = kernel_meter, **pool):
    """A real origin and `count` caches of one pool in front of it (`pool`: XCachePool overrides).

    meter(name, pool body) starts what receives a cache's reports (its `.port`), before the cache starts.
    """
    origin = start_origin(xrd_base, xrootd_account)
    caches: list[RingCache] = []
    try:
        for index in range(count):
            name = f"127.0.0.{index + 2}"
            data = xrootd_account.make_dir(xrd_base / f"c{index}" / "data")
            meta = xrootd_account.make_dir(xrd_base / f"c{index}" / "meta")
            body = cache_pool(origin.daemon.port, [str(data)], str(meta), **pool)
            caches.append(RingCache(name, None, meter(name, body), meta / "namespace"))
            caches[-1].cache = start_cache(xrd_base, xrootd_account, body, exporter_port=caches[-1].meter.port)
        yield origin, caches
    finally:
        for c in caches:
            if c.cache is not None:
                c.cache.daemon.stop()
            c.meter.close()
        origin.daemon.stop()
        origin.meter.close()


def homes(files, caches: list[RingCache]) -> dict[str, str]:
    return {lfn: hashing.home(lfn, [c.name for c in caches]) for lfn in files}


def assert_each_cache_holds_its_own_files(caches: list[RingCache], expected: dict[str, str]) -> None:
    for c in caches:
        assert {lfn for lfn in expected if c.holds(lfn)} == {lfn for lfn, h in expected.items() if h == c.name}


def metric_values(text: str) -> dict[str, float]:
    """name{further labels} → value, from a /metrics page about one cache host."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            extra = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k not in ("pool", "host", "switch"))
            out[f"{sample.name}{{{extra}}}" if extra else sample.name] = sample.value
    return out


SUMMARIES = "switchyard_xcache_monitoring_packets_total{kind=summary}"


class ExporterMeter:
    """A cache host's counters as its exporter sidecar serves them on /metrics (scraped over HTTP)."""

    def __init__(self, exporter: Exporter, port: int, host: str) -> None:
        self.exporter, self.port, self.host = exporter, port, host

    def scrape(self) -> dict[str, float]:
        text = self.exporter.scrape()
        assert f'host="{self.host}"' in text, f"the exporter does not label its samples host={self.host}"
        return metric_values(text)

    def mark(self, moment: float) -> float:
        """The count of summaries at which two have arrived since `moment` (Unix time).

        The exporter stamps a summary when it arrives, not when xrootd made it: the
        second one to arrive after `moment` was made a report interval after the
        first, so it counts every byte sent before `moment`.
        """
        values = self.scrape()
        arrived = values.get("switchyard_xcache_last_summary_timestamp_seconds", 0) > moment
        return values.get(SUMMARIES, 0) + (1 if arrived else 2)

    def reached(self, mark: float) -> dict[str, float] | None:
        values = self.scrape()
        return values if values.get(SUMMARIES, 0) >= mark else None

    def after(self, moment: float, timeout: float = 30.0) -> dict[str, float]:
        """The counters, counting every byte sent before `moment`."""
        mark = self.mark(moment)
        wait_until(lambda: self.reached(mark), timeout=timeout, interval=0.1, what=f"summaries from {self.host}")
        return self.reached(mark)

    def bytes_sent_after(self, moment: float, timeout: float = 30.0) -> int:
        return int(self.after(moment, timeout)["switchyard_xcache_client_bytes_total"])

    def describe(self) -> str:
        """What a failure report needs of the exporter: is it running, what it last counted, its log."""
        try:
            values = self.scrape()
            seen = (f"summaries {values.get(SUMMARIES, 0):.0f}, the last at "
                    f"{values.get('switchyard_xcache_last_summary_timestamp_seconds', 0):.1f} (now {time.time():.1f}), "
                    f"packets refused {values.get('switchyard_xcache_monitoring_malformed_packets_total', 0):.0f}")
        except (OSError, AssertionError) as error:
            seen = f"not scraped ({error})"
        log = self.exporter.log.read_text(errors="replace")[-1500:] if self.exporter.log.exists() else ""
        return (f"\nits exporter (UDP {self.port}): exit code {self.exporter.process.poll()}, {seen}; "
                f"its log ends:\n{log}")

    def close(self) -> None:
        self.exporter.stop()


def exporter_sidecars(workdir: Path, pool: str, switch_of: dict[str, str],
                      volumes: dict[str, Path] | None = None) -> Callable[[str, XCachePoolBody], ExporterMeter]:
    """A meter factory for running_ring: each cache's exporter, run as its pod runs the sidecar.

    The container's args and env come from the StatefulSet the builder makes for the
    cache's switch, on a node named after the cache; only the ports differ (every host
    here shares one machine): the UDP port xrootd reports to and the /metrics port.
    `volumes`: volume name -> the directory standing in for it (the `clients` ConfigMap, say).
    """
    def start(name: str, body: XCachePoolBody) -> ExporterMeter:
        spec = XCachePoolSpec.model_validate({**body.model_dump(by_alias=True, mode="json"), "facilityRef": {"name": "af"}})
        statefulset = build_statefulset(pool, spec, switch_of[name], (name,), "switchyard.dev/switch", "-", "switchyard:test")
        container = next(c for c in statefulset["spec"]["template"]["spec"]["containers"] if c["name"] == "exporter")
        env = pod_env(container, statefulset["metadata"]["name"] + "-0", name, {})
        args = [on_volumes(a, container, volumes) for a in pod_argv(container, env)]
        assert args[0] == "exporter" and "--udp" in args, args
        udp = free_port(socket.SOCK_DGRAM)
        args[args.index("--udp") + 1] = f"127.0.0.1:{udp}"
        # `switchyard exporter ARGS` is `python -m switchyard.observe.exporter ARGS` (cli.py hands them over)
        return ExporterMeter(start_exporter(args[1:], workdir, env), udp, name)

    return start


_ROOT_ADDRESS = re.compile(r"(?<=root://)[^/,=]+")


def on_loopback(value: str, addresses: dict[str, str]) -> str:
    """`value` with each root://host:port that `addresses` names replaced by where it listens here."""
    return _ROOT_ADDRESS.sub(lambda m: addresses.get(m.group(0), m.group(0)), value)


def pod_env(container: dict, pod_name: str, node_name: str, addresses: dict[str, str]) -> dict[str, str]:
    """The container's environment as the kubelet gives it (fieldRefs resolved), cache addresses on loopback."""
    fields = {"metadata.name": pod_name, "status.podIP": "127.0.0.1", "spec.nodeName": node_name}
    env = {}
    for item in container.get("env", []):
        value = item["value"] if "value" in item else fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
        env[item["name"]] = on_loopback(value, addresses)
    return env


def pod_argv(container: dict, env: dict[str, str]) -> list[str]:
    """command + args with $(VAR) expanded from the container's env, as the kubelet does."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a)
            for a in container.get("command", []) + container.get("args", [])]


def stop_all(processes: list[subprocess.Popen]) -> None:
    """SIGTERM to each, then wait for all (they close in parallel); a kill after 30 s."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextlib.contextmanager
def dask_scheduler(log: Path) -> Iterator[str]:
    """A real Dask scheduler on loopback; yields its address."""
    port = free_port()
    with open(log, "ab") as out:
        process = subprocess.Popen([str(Path(sys.executable).parent / "dask"), "scheduler", "--host", "127.0.0.1",
                                    "--port", str(port), "--no-dashboard"], stdout=out, stderr=subprocess.STDOUT)
    try:
        yield f"tcp://127.0.0.1:{port}"
    finally:
        stop_all([process])


def publish_config(volume: KubeletVolume, config: dict, addresses: dict[str, str]) -> None:
    """A ConfigMap's data as the kubelet puts it in its volume, cache addresses on loopback."""
    volume.publish({key: on_loopback(text, addresses) for key, text in config["data"].items()})


def on_volumes(value: str, container: dict, volumes: dict[str, Path] | None) -> str:
    """`value` with each path at or under one of the container's mounts moved to the directory standing
    in for its volume (`volumes`: volume name -> a directory here); PATH-like values part by part."""
    def moved(part: str) -> str:
        for mount in container.get("volumeMounts", []):
            if mount["name"] in (volumes or {}) and (part == mount["mountPath"] or part.startswith(mount["mountPath"] + "/")):
                return str(volumes[mount["name"]]) + part[len(mount["mountPath"]):]
        return part
    return ":".join(moved(part) for part in value.split(":"))


def pod_container(deployment: dict, name: str) -> dict:
    """A container or init container of a generated Deployment's pod, by name."""
    pod = deployment["spec"]["template"]["spec"]
    return next(c for c in pod.get("initContainers", []) + pod["containers"] if c["name"] == name)


def run_init_container(deployment: dict, name: str, volumes: dict[str, Path], bin_dir: Path,
                       extra_args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """An init container of a generated pod, run here: its command (or the image's entrypoint, `switchyard`),
    args and env, with its mounts at the directories `volumes` names and its executables from `bin_dir`."""
    container = pod_container(deployment, name)
    env = {k: on_volumes(v, container, volumes) for k, v in pod_env(container, "pod-0", "worker-node", {}).items()}
    argv = [on_volumes(a, container, volumes) for a in pod_argv(container, env)]
    if "command" not in container:
        argv = ["switchyard", *argv]  # the operator image's entrypoint
    return subprocess.run([str(bin_dir / argv[0]), *argv[1:], *extra_args], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], **env}, timeout=120)


def start_pod_worker(deployment: dict, scheduler: str, addresses: dict[str, str], log: Path, home: Path,
                     pod_name: str | None = None, extra_env: dict[str, str] | None = None,
                     volumes: dict[str, Path] | None = None, bin_dir: Path | None = None) -> subprocess.Popen:
    """A Dask worker run from a generated Deployment's worker container: its command, args and env.

    The scheduler's address stands in for the one the pod names (a Service); `addresses` maps
    the cache addresses the pod is given to where those caches listen here; `volumes` (volume
    name -> a directory here) stand in for its mounts: paths under a mount point go there;
    `bin_dir`: where its image's `dask` is (default: this Python's).
    """
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    pod_name = pod_name or deployment["metadata"]["name"] + "-0"
    env = {**pod_env(container, pod_name, "worker-node", addresses), **(extra_env or {})}
    env = {k: on_volumes(v, container, volumes) for k, v in env.items()}
    argv = pod_argv(container, env)
    assert argv[:2] == ["dask", "worker"], argv
    argv = [str((bin_dir or Path(sys.executable).parent) / "dask"), "worker", scheduler, *argv[3:]]
    with open(log, "ab") as out:
        return subprocess.Popen(argv, env={"PATH": os.environ["PATH"], "HOME": str(home), **env},
                                stdout=out, stderr=subprocess.STDOUT)


SWITCHYARD_ENTRIES = ("switchyard-", "__editable__.switchyard-", "__editable___switchyard_")


def python_without_switchyard(root: Path, without: tuple[str, ...] = ()) -> Path:
    """A Python environment like an analysis image's: this one's packages (distributed, uproot,
    fsspec-xrootd, the XRootD bindings...) but no switchyard, nor any package named in `without`
    (top-level names). A venv whose site-packages links each of this one's entries but those;
    returns its bin directory (python3 and a `dask` script, as an image has)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    import sysconfig

    ours = Path(sysconfig.get_paths()["purelib"])
    (theirs,) = root.glob("lib/python*/site-packages")
    skipped = tuple(without) + tuple(f"{name}-" for name in without)
    for entry in sorted(ours.iterdir()):
        name = entry.name
        if name.startswith(SWITCHYARD_ENTRIES) or name == "__pycache__" or name.split(".")[0] in without \
                or name.startswith(skipped):
            continue
        (theirs / name).symlink_to(entry)
    bin_dir = root / "bin"
    (bin_dir / "dask").write_text(f"#!{bin_dir / 'python3'}\nimport sys\nfrom dask.__main__ import main\n"
                                  "if __name__ == '__main__':\n    sys.exit(main())\n")  # as pip writes it
    (bin_dir / "dask").chmod(0o755)
    return bin_dir
