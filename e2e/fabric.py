"""An emulated switch fabric: network namespaces, bridges, veth pairs and tc HTB.

A spine bridge, one bridge per switch (each in its own namespace), one
namespace per node that hosts a cache or readers, and an origin behind a WAN
link. Every link is shaped on the egress of each veth end, so both directions
of an uplink, a NIC and the WAN have their own rate (no IFB). Real xrootd
origin and caches run inside the namespaces (as the unprivileged xrootd user),
real XRootD-client readers too (fabric_reader.py); bytes are read from the
interface counters.

Everything this module makes is named with PREFIX ("syfab-") and a run tag:
namespaces `syfab-<tag>-spine`, `-s<i>` (switches), `-n<i>` (nodes), `-origin`.
Links live only inside those namespaces, so deleting the namespaces removes
them; processes are found with `ip netns pids`. No namespace has a route out,
and every sysctl changed is a per-namespace one (gone with the namespace),
except one: a run that picks a congestion control the host does not allow
adds it to the host's allowed list, and the last teardown puts the list back.

    python3 e2e/fabric.py down [--tag TAG]     # remove what a (dead) run left

Rates: HTB counts whole frames, so shaped rates and the counters are both in
wire bytes (a full TCP frame carries 1448 payload bytes in 1514: payload is
~0.956 of a shaped rate).
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "syfab-"
XROOTD_USER = os.environ.get("XROOTD_USER", "xrootd")
PORT = 1094
SUBNET = "10.77"
ORIGIN_IP = f"{SUBNET}.250.1"
READER = Path(__file__).resolve().parent / "fabric_reader.py"
ALLOWED_CONGESTION = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
# The host's allowed list before a run widened it: kept on disk so `down` restores it after a killed run too.
SAVED_CONGESTION = Path(tempfile.gettempdir()) / f"{PREFIX}allowed-congestion"


class FabricError(RuntimeError):
    pass


def run(*args: str, check: bool = True, quiet: bool = False, input: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(list(args), capture_output=True, text=True, check=False, input=input)
    if check and result.returncode != 0:
        raise FabricError(f"{' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")
    return result


def namespaces(prefix: str = PREFIX) -> list[str]:
    out = run("ip", "-j", "netns", "list", check=False).stdout.strip()
    names = [entry["name"] for entry in json.loads(out)] if out else []
    return sorted(n for n in names if n.startswith(prefix))


def down(prefix: str = PREFIX) -> list[str]:
    """Stop every process inside, then delete, every namespace named with `prefix`."""
    found = namespaces(prefix)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = False
        for ns in found:
            for pid in run("ip", "netns", "pids", ns, check=False).stdout.split():
                alive = True
                try:
                    os.kill(int(pid), sig)
                except ProcessLookupError:
                    pass
        if not alive:
            break
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(run("ip", "netns", "pids", ns, check=False).stdout.strip()
                                                  for ns in found):
            time.sleep(0.1)
    for ns in found:
        run("ip", "netns", "del", ns, check=False)
    if not namespaces(PREFIX):
        restore_congestion()
    return found


def host_congestion() -> str:
    return Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()


def allow_congestion(name: str) -> None:
    """Let namespaces pick `name` as TCP congestion control (a namespace may only pick what the host allows)."""
    allowed = ALLOWED_CONGESTION.read_text().split()
    if name in allowed:
        return
    if not SAVED_CONGESTION.exists():
        SAVED_CONGESTION.write_text(" ".join(allowed))
    ALLOWED_CONGESTION.write_text(" ".join([*allowed, name]))


def restore_congestion() -> None:
    """The host's allowed congestion controls as they were before any fabric widened them."""
    if SAVED_CONGESTION.exists():
        ALLOWED_CONGESTION.write_text(SAVED_CONGESTION.read_text())
        SAVED_CONGESTION.unlink()


QUEUE_MS = 40.0   # a shaped link's drop-tail FIFO, in milliseconds of its rate


def queue_floor_bytes(queue_ms: float = QUEUE_MS) -> float:
    """The least a shaped link's FIFO holds: 256 KB at the default 40 ms, proportionally less for a shorter
    queue (a few frames per flow on the slowest links)."""
    return 256_000 * min(1.0, queue_ms / QUEUE_MS)


def fifo_limit(mbit: float, queue_ms: float = QUEUE_MS) -> int:
    """Bytes a shaped link's drop-tail FIFO holds: `queue_ms` of its rate, at least queue_floor_bytes(queue_ms)."""
    return int(max(queue_floor_bytes(queue_ms), mbit * 1e6 / 8 * queue_ms / 1000))


def shape(ns: str, dev: str, mbit: float, queue_ms: float = QUEUE_MS) -> None:
    """HTB at `mbit` on the egress of `dev`, with a drop-tail FIFO of fifo_limit(mbit, queue_ms)."""
    rate = f"{mbit:.3f}mbit"
    limit = fifo_limit(mbit, queue_ms)
    run("tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
    run("tc", "-n", ns, "class", "replace", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", rate,
        "ceil", rate, "burst", "64k", "cburst", "64k", "quantum", "60000")
    run("tc", "-n", ns, "qdisc", "replace", "dev", dev, "parent", "1:1", "handle", "10:", "bfifo", "limit",
        str(limit))


HOST_QUEUES = ("fair", "fifo")
PEER_BUCKETS = 8         # by the peer address's low bits: a fabric numbers its hosts in a row
PORT_BUCKETS = 256       # by a port's bits 1-8 (connect() picks even ports, in a row per peer)
EPHEMERAL_FROM = 0x8000  # Linux's ephemeral ports start at 32768: a port below it is a server's


def shape_host(ns: str, dev: str, mbit: float, queue_ms: float = QUEUE_MS) -> None:
    """A host's own NIC out: HTB at `mbit`, its TCP flows hashed by peer address and client port into
    PEER_BUCKETS × PORT_BUCKETS leaves (each a drop-tail FIFO of fifo_limit()) that share the rate
    round-robin, a quantum of one frame each.

    A Linux host queues what its NIC cannot send yet in fq_codel (the default qdisc of systemd's
    distributions and EL9; 1024 flow buckets) or fq: a queue per flow, served in turn. Neither is
    built into this kernel, nor is sfq; this is sfq from HTB and u32. One FIFO there instead let a
    cache host at its cap serve some readers 2 Mbit/s and others 6 for a whole run, the slow ones'
    windows stuck at 7-12 frames beside 21-47 (bench/notes/outside-readers-host-fifo.md). A switch
    port (the uplinks, a NIC's switch end) stays one FIFO (shape()).
    """
    rate = f"{mbit:.3f}mbit"
    leaves = PEER_BUCKETS * PORT_BUCKETS
    limit = fifo_limit(mbit, queue_ms)
    first = 0x100
    lines = [f"qdisc replace dev {dev} root handle 1: htb default {first:x}",
             f"class replace dev {dev} parent 1: classid 1:1 htb rate {rate} ceil {rate} burst 64k cburst 64k "
             "quantum 60000"]
    for leaf in range(first, first + leaves):
        lines += [f"class replace dev {dev} parent 1:1 classid 1:{leaf:x} htb rate {mbit / leaves:.6f}mbit "
                  f"ceil {rate} burst 4k cburst 4k quantum 1514",
                  f"qdisc replace dev {dev} parent 1:{leaf:x} handle {leaf:x}: bfifo limit {limit}"]
    # Tables: 1 and 2 by the peer (the destination address's low bits), from a server port (1: hash the
    # destination port next) or not (2: the source port); 0x10+i by the port, the leaves of peer bucket i.
    # What is not TCP goes to the first leaf (HTB's default).
    lines += [f"filter add dev {dev} parent 1: prio 1 handle {t:x}: protocol ip u32 divisor {n}"
              for t, n in ((1, PEER_BUCKETS), (2, PEER_BUCKETS),
                           *((0x10 + i, PORT_BUCKETS) for i in range(PEER_BUCKETS)))]
    peer_mask = f"0x{PEER_BUCKETS - 1:08x}"
    lines += [f"filter add dev {dev} parent 1: prio 1 protocol ip u32 ht 800:: match ip protocol 6 0xff "
              f"match ip sport 0 0x{EPHEMERAL_FROM:x} hashkey mask {peer_mask} at 16 link 1:",
              f"filter add dev {dev} parent 1: prio 1 protocol ip u32 ht 800:: match ip protocol 6 0xff "
              f"hashkey mask {peer_mask} at 16 link 2:"]
    port_mask = (PORT_BUCKETS - 1) << 1
    for i in range(PEER_BUCKETS):
        lines += [f"filter add dev {dev} parent 1: prio 1 protocol ip u32 ht 1:{i:x}: match u32 0 0 "
                  f"hashkey mask 0x{port_mask:08x} at 20 link {0x10 + i:x}:",
                  f"filter add dev {dev} parent 1: prio 1 protocol ip u32 ht 2:{i:x}: match u32 0 0 "
                  f"hashkey mask 0x{port_mask << 16:08x} at 20 link {0x10 + i:x}:"]
        lines += [f"filter add dev {dev} parent 1: prio 1 protocol ip u32 ht {0x10 + i:x}:{b:x}: match u32 0 0 "
                  f"flowid 1:{first + i * PORT_BUCKETS + b:x}" for b in range(PORT_BUCKETS)]
    run("tc", "-n", ns, "-batch", "-", input="\n".join(lines) + "\n")


def unshape(ns: str, dev: str) -> None:
    run("tc", "-n", ns, "qdisc", "del", "dev", dev, "root", check=False)


@dataclass
class Port:
    """One veth end that carries a shaped direction: bytes leaving `dev` in `ns`."""

    ns: str
    dev: str
    mbit: float
    host: bool = False      # a host's own NIC out (shape_host), not a switch port


@dataclass
class Node:
    name: str
    switch: str
    ns: str
    ip: str
    nic_out_mbit: float   # leaving the node (what a cache serves is capped here)
    nic_in_mbit: float    # entering the node


@dataclass
class Fabric:
    """The fabric of one run. Use as a context manager: leaving it tears everything down."""

    tag: str
    uplinks_mbit: dict[str, float]            # switch -> uplink Mbit/s (each direction)
    nodes: list[Node] = field(default_factory=list)
    wan_mbit: float = 1000.0
    congestion: str = ""                      # TCP congestion control of every namespace; "" keeps the host's
    queue_ms: float = QUEUE_MS                # every shaped link's FIFO
    host_queue: str = "fair"                  # a host's NIC out: "fair" (shape_host) or "fifo" (shape)
    workdir: Path | None = None
    switch_ns: dict[str, str] = field(default_factory=dict)
    ports: list[Port] = field(default_factory=list)
    processes: list[subprocess.Popen] = field(default_factory=list)
    readers: list[subprocess.Popen] = field(default_factory=list)
    _held: list[tuple[subprocess.Popen, Path]] = field(default_factory=list)  # readers waiting at the start

    @property
    def _go(self) -> Path:
        return self.workdir / "readers.go"

    @classmethod
    def plan(cls, tag: str, uplinks_mbit: dict[str, float], hosts: list[tuple[str, str, float, float]],
             wan_mbit: float, congestion: str = "", queue_ms: float = QUEUE_MS,
             host_queue: str = "fair") -> "Fabric":
        """hosts: (node, switch, Mbit/s out, Mbit/s in)."""
        if host_queue not in HOST_QUEUES:
            raise ValueError(f"host_queue must be one of {HOST_QUEUES}, not {host_queue!r}")
        fabric = cls(tag, dict(uplinks_mbit), wan_mbit=wan_mbit, congestion=congestion, queue_ms=queue_ms,
                     host_queue=host_queue)
        for i, (name, switch, out_mbit, in_mbit) in enumerate(hosts):
            ip = f"{SUBNET}.{1 + i // 250}.{1 + i % 250}"
            fabric.nodes.append(Node(name, switch, f"{fabric.prefix}n{i}", ip, out_mbit, in_mbit))
        for i, switch in enumerate(sorted(uplinks_mbit)):
            fabric.switch_ns[switch] = f"{fabric.prefix}s{i}"
        return fabric

    @property
    def prefix(self) -> str:
        return f"{PREFIX}{self.tag}-"

    @property
    def spine(self) -> str:
        return f"{self.prefix}spine"

    @property
    def origin_ns(self) -> str:
        return f"{self.prefix}origin"

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    # ------------------------------------------------------------ build and teardown

    def __enter__(self) -> "Fabric":
        try:
            self.build()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def _namespace(self, ns: str) -> None:
        run("ip", "netns", "add", ns)
        run("ip", "-n", ns, "link", "set", "lo", "up")
        for key in ("net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"):
            run("ip", "netns", "exec", ns, "sysctl", "-qw", f"{key}=1", check=False)
        if self.congestion:
            run("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv4.tcp_congestion_control={self.congestion}")

    def _bridge(self, ns: str) -> None:
        run("ip", "-n", ns, "link", "add", "syfbr", "type", "bridge", "stp_state", "0", "forward_delay", "0",
            "mcast_snooping", "0")
        run("ip", "-n", ns, "link", "set", "syfbr", "up")
        # Bridged frames must not pass through the host's iptables (per-namespace when br_netfilter is loaded).
        run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=0", check=False)

    def _cable(self, ns_a: str, dev_a: str, ns_b: str, dev_b: str, bridge_b: bool, mbit_a: float, mbit_b: float,
               bridge_a: bool = False, host_a: bool = False) -> None:
        """A veth pair; mbit_a shapes what leaves ns_a (through dev_a), mbit_b what leaves ns_b; host_a: ns_a is
        a host and dev_a its NIC."""
        run("ip", "link", "add", "name", dev_a, "netns", ns_a, "type", "veth", "peer", "name", dev_b, "netns", ns_b)
        for ns, dev, bridged in ((ns_a, dev_a, bridge_a), (ns_b, dev_b, bridge_b)):
            if bridged:
                run("ip", "-n", ns, "link", "set", "dev", dev, "master", "syfbr")
            run("ip", "-n", ns, "link", "set", "dev", dev, "up")
        self.ports += [Port(ns_a, dev_a, mbit_a, host_a), Port(ns_b, dev_b, mbit_b)]

    def build(self) -> None:
        """Namespaces, bridges and veths, unshaped (call shape_links() after warming the caches)."""
        if namespaces(self.prefix):
            raise FabricError(f"namespaces {self.prefix}* exist already: run `python3 e2e/fabric.py down`")
        if self.congestion:
            allow_congestion(self.congestion)
        self.workdir = Path(tempfile.mkdtemp(prefix=self.prefix))
        self.workdir.chmod(0o755)
        self._namespace(self.spine)
        self._bridge(self.spine)
        for switch, ns in sorted(self.switch_ns.items()):
            self._namespace(ns)
            self._bridge(ns)
            mbit = self.uplinks_mbit[switch]
            # syfup: the switch's end (egress = leaving the switch); the spine's end is named after the switch ns
            self._cable(ns, "syfup", self.spine, _peer(ns), True, mbit, mbit, bridge_a=True)
        for node in self.nodes:
            self._namespace(node.ns)
            sw = self.switch_ns[node.switch]
            self._cable(node.ns, "eth0", sw, _peer(node.ns), True, node.nic_out_mbit,
                        node.nic_in_mbit, host_a=True)
            run("ip", "-n", node.ns, "addr", "add", f"{node.ip}/16", "dev", "eth0")
        self._namespace(self.origin_ns)
        self._cable(self.origin_ns, "eth0", self.spine, "syfwan", True, self.wan_mbit, self.wan_mbit)
        run("ip", "-n", self.origin_ns, "addr", "add", f"{ORIGIN_IP}/16", "dev", "eth0")
        (self.workdir / "fabric.json").write_text(json.dumps(self.describe(), indent=1))

    def shape_links(self, factor: float = 1.0) -> None:
        for port in self.ports:
            fair = port.host and self.host_queue == "fair"
            (shape_host if fair else shape)(port.ns, port.dev, port.mbit * factor, self.queue_ms)

    def unshape_links(self) -> None:
        for port in self.ports:
            unshape(port.ns, port.dev)

    def down(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        down(self.prefix)
        for process in self.processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.processes.clear()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def describe(self) -> dict:
        return {"tag": self.tag, "uplinks_mbit": self.uplinks_mbit, "wan_mbit": self.wan_mbit,
                "congestion": self.congestion or host_congestion(), "queue_ms": self.queue_ms,
                "host_queue": self.host_queue,
                "switch_ns": self.switch_ns, "nodes": [vars(n) for n in self.nodes]}

    # ------------------------------------------------------------ processes

    def spawn(self, ns: str, argv: list[str], log: Path, as_xrootd: bool = False) -> subprocess.Popen:
        prefix = ["ip", "netns", "exec", ns]
        if as_xrootd:
            account = pwd.getpwnam(XROOTD_USER)
            prefix += ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--clear-groups"]
        with open(log, "ab") as out:
            process = subprocess.Popen(prefix + argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True, cwd=self.workdir)
        self.processes.append(process)
        return process

    def _xrootd_dir(self, name: str) -> Path:
        account = pwd.getpwnam(XROOTD_USER)
        path = self.workdir / name
        for sub in ("", "admin"):
            (path / sub).mkdir(parents=True, exist_ok=True)
            os.chown(path / sub, account.pw_uid, account.pw_gid)
        return path

    def _xrootd(self, ns: str, ip: str, name: str, config: str, segfault_retries: int = 1) -> subprocess.Popen:
        path = self._xrootd_dir(name)
        admin = path / "admin"
        cfg = path / "xrootd.cfg"
        cfg.write_text(config + f"\nall.adminpath {admin}\nall.pidpath {admin}\n")
        process = self.spawn(ns, ["xrootd", "-I", "v4", "-c", str(cfg), "-l", str(path / "xrootd.log"), "-n", name],
                             path / "stdout.log", as_xrootd=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.poll() is not None:
                # xrootd 5.5.3 (Debian) rarely segfaults while starting (also seen by the integration
                # fixtures); a second start is what an init system would do. A second crash fails.
                if process.returncode == -signal.SIGSEGV and segfault_retries > 0:
                    print(f"xrootd {name} crashed (SIGSEGV) while starting; starting it once more", file=sys.stderr)
                    return self._xrootd(ns, ip, name, config, segfault_retries - 1)
                raise FabricError(f"xrootd {name} exited with {process.returncode}: {self.log_tail(name)}")
            if run("ip", "netns", "exec", ns, "bash", "-c", f"exec 3<>/dev/tcp/{ip}/{PORT}", check=False,
                   ).returncode == 0:
                return process
            time.sleep(0.2)
        raise FabricError(f"xrootd {name} did not listen on {ip}:{PORT}: {self.log_tail(name)}")

    def log_tail(self, name: str, chars: int = 3000) -> str:
        for log in (self.workdir / name / name / "xrootd.log", self.workdir / name / "stdout.log"):
            if log.exists():
                return log.read_text(errors="replace")[-chars:]
        return "(no log)"

    def start_origin(self, files: dict[str, int], seed: int = 0) -> list[str]:
        """A plain xrootd in the origin namespace serving `files` (name -> bytes, random content)."""
        account = pwd.getpwnam(XROOTD_USER)
        path = self._xrootd_dir("origin")
        data = path / "data"
        data.mkdir(exist_ok=True)
        os.chown(data, account.pw_uid, account.pw_gid)
        chunk = os.urandom(1 << 20)
        for i, (name, size) in enumerate(sorted(files.items())):
            with open(data / name, "wb") as out:
                left = size
                while left > 0:
                    # a different first block per file, so no two files are alike
                    piece = (chunk if left != size else os.urandom(1 << 20))[:left]
                    out.write(piece)
                    left -= len(piece)
            os.chown(data / name, account.pw_uid, account.pw_gid)
        self._xrootd(self.origin_ns, ORIGIN_IP, "origin",
                     "\n".join(["all.export / r/o", f"oss.localroot {data}", f"xrd.port {PORT}",
                                "xrd.network nodnr"]))
        return ["/" + name for name in sorted(files)]

    def start_cache(self, node_name: str, config_text: str, name: str | None = None) -> None:
        """xrootd on `config_text` (switchyard's rendered config) in the node's namespace."""
        node = self.node(node_name)
        self._xrootd(node.ns, node.ip, name or f"cache-{node.ns.removeprefix(self.prefix)}", config_text)

    def cache_dirs(self, node_name: str) -> tuple[str, str]:
        """A data and a meta directory for the cache on `node_name`, owned by the xrootd user."""
        account = pwd.getpwnam(XROOTD_USER)
        base = self.workdir / f"disk-{self.node(node_name).ns.removeprefix(self.prefix)}"
        out = []
        for sub in ("data", "meta"):
            (base / sub).mkdir(parents=True, exist_ok=True)
            os.chown(base / sub, account.pw_uid, account.pw_gid)
            out.append(str(base / sub))
        return out[0], out[1]

    def _reader(self, node_name: str, spec: dict, name: str) -> subprocess.Popen:
        node = self.node(node_name)
        path = self.workdir / f"{name}.json"
        path.write_text(json.dumps(spec))
        return self.spawn(node.ns, [sys.executable, str(READER), str(path)], self.workdir / f"{name}.log")

    def read_once(self, node_name: str, urls: list[str], timeout: float = 600) -> None:
        """Read every URL once from the node (fabric_reader.py), e.g. to warm a cache; raises if any read failed."""
        name = f"warm-{self.node(node_name).ns.removeprefix(self.prefix)}"
        process = self._reader(node_name, {"once": True, "streams": [{"urls": urls}]}, name)
        if process.wait(timeout=timeout) != 0:
            raise FabricError(f"reads from {node_name} failed: "
                              f"{(self.workdir / (name + '.log')).read_text(errors='replace')[-2000:]}")
        self.processes.remove(process)

    def start_readers(self, node_name: str, streams: list[tuple[list[str], float]],
                      once: bool = False, process: str = "", shared: bool = False) -> subprocess.Popen:
        """The node's reader streams in one process: (URLs read in order round and round, wire Mbit/s pace or
        0). Each stream has XRootD connections of its own, as a worker in a process of its own has (the
        client keeps one connection per user and server: each stream logs in as a user of its own); with
        `shared`, the streams share the process's, as a Dask worker's threads do. A host's NIC serves its
        flows in turn (shape_host), so the two differ: 8 streams on one connection get one flow's turn.
        `process` names another process on the node (a batch job of its own). With `once`, each stream
        reads its URLs once and the process exits; reader_report(node, process) then has their ends. The
        readers read nothing until release_readers()."""
        name = self._readers_name(node_name, process)
        ready = self.workdir / f"{name}.ready"
        if not shared:
            streams = [([as_user(url, f"s{i}") for url in urls], mbit) for i, (urls, mbit) in enumerate(streams)]
        spec = {"streams": [{"urls": urls, "wire_mbit": mbit} for urls, mbit in streams], "once": once,
                "report": str(self.workdir / f"{name}.done.json"), "ready": str(ready), "go": str(self._go)}
        for stale in (self.workdir / f"{name}.done.json", ready):
            stale.unlink(missing_ok=True)
        process = self._reader(node_name, spec, name)
        self.readers.append(process)
        self._held.append((process, ready))
        return process

    def release_readers(self, timeout: float = 180) -> float:
        """Start every reader started since the last release at once, when all have started (imports done);
        returns that moment (time.time()).

        Processes started one after another would start reading in that order, seconds apart with tens of
        them on two cores, and flows that start first keep a larger share of a shared link for longer than a
        run at these scaled rates (bench/notes/outside-readers-48-readers.md: a rack whose 48 readers started
        first read 1.08-1.14 of fair, the other rack's then first read 1.08-1.13)."""
        self.wait_readers_started(timeout)
        self._held.clear()
        self._go.touch()
        return time.time()

    def wait_readers_started(self, timeout: float = 180) -> None:
        """Wait until every reader waiting at the start line has started (its imports done), reading nothing."""
        deadline = time.monotonic() + timeout
        for process, ready in self._held:
            while not ready.exists():
                if process.poll() is not None:
                    raise FabricError(f"a reader exited ({process.returncode}) before the start: "
                                      f"{ready.name.removesuffix('.ready')}.log in {self.workdir}")
                if time.monotonic() > deadline:
                    raise FabricError(f"readers not started within {timeout:.0f} s")
                time.sleep(0.05)   # a harness poll for the readers' ready files (no kopf handler here)

    def reader_report(self, node_name: str, process: str = "") -> dict:
        """What the node's readers wrote as they ended (fabric_reader.py "report"): each stream's end, failures."""
        name = self._readers_name(node_name, process)
        return json.loads((self.workdir / f"{name}.done.json").read_text())

    def _readers_name(self, node_name: str, process: str) -> str:
        return f"readers-{self.node(node_name).ns.removeprefix(self.prefix)}" + (f"-{process}" if process else "")

    def stop_readers(self) -> None:
        for process in self.readers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.readers:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        self.processes = [p for p in self.processes if p not in self.readers]
        self.readers.clear()
        self._held.clear()
        self._go.unlink(missing_ok=True)

    # ------------------------------------------------------------ counters

    def counters(self) -> dict[str, tuple[int, int]]:
        """Bytes (out, in) per uplink ("uplink:<switch>"), node ("host:<node>") and "wan" (origin's side)."""
        out = {}
        for switch, ns in self.switch_ns.items():
            out[f"uplink:{switch}"] = _bytes(ns, "syfup")
        for node in self.nodes:
            out[f"host:{node.name}"] = _bytes(node.ns, "eth0")
        out["wan"] = _bytes(self.origin_ns, "eth0")
        return out


    def wire_counters(self) -> dict[str, tuple[int, int]]:
        """Like counters(), but the bytes each direction's shaper sent: whole frames, a header per TCP segment.

        This is what a shaped rate is charged with, so a full link sends its rate
        whatever the senders' packet sizes. The interface counters see a GSO burst
        as one packet with one header: a full link reads about 0.96 of its rate in
        them (bench/notes/scripts/shaper_counts.py).
        """
        sent = {(ns, dev): count
                for ns in {self.spine, self.origin_ns, *self.switch_ns.values(), *(n.ns for n in self.nodes)}
                for dev, count in shaped_bytes(ns).items()}

        def pair(out: tuple[str, str], inn: tuple[str, str]) -> tuple[int, int]:
            return sent.get(out, 0), sent.get(inn, 0)

        out = {f"uplink:{switch}": pair((ns, "syfup"), (self.spine, _peer(ns)))
               for switch, ns in self.switch_ns.items()}
        for node in self.nodes:
            out[f"host:{node.name}"] = pair((node.ns, "eth0"), (self.switch_ns[node.switch], _peer(node.ns)))
        out["wan"] = pair((self.origin_ns, "eth0"), (self.spine, "syfwan"))
        return out


def as_user(url: str, user: str) -> str:
    """root://host:port/path as `user` (root://user@host:port/path)."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{user}@{rest}"


def shaped_bytes(ns: str, dev: str | None = None) -> dict[str, int]:
    """device -> bytes its root HTB has sent, for every shaped device of a namespace (or one of them)."""
    out = run("tc", "-n", ns, "-j", "-s", "qdisc", "show", *(("dev", dev) if dev else ()), check=False).stdout
    # (given one device, tc leaves "dev" out of its answer)
    return {q.get("dev", dev): q["bytes"] for q in json.loads(out or "[]") if q.get("kind") == "htb" and q.get("root")}


def _peer(ns: str) -> str:
    """The name of a namespace's cable end on the bridge it hangs from (see build())."""
    return ns.removeprefix(PREFIX)[-14:]


def _bytes(ns: str, dev: str) -> tuple[int, int]:
    """(tx, rx) bytes of a link in a namespace: out of and into that namespace."""
    stats = json.loads(run("ip", "-n", ns, "-j", "-s", "link", "show", "dev", dev).stdout)[0]["stats64"]
    return stats["tx"]["bytes"], stats["rx"]["bytes"]


def cpu_times() -> tuple[float, float, float]:
    """(busy, total, softirq) jiffies of all CPUs (/proc/stat), for the headroom of a window."""
    fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    total = sum(fields[:8])
    return total - idle, total, fields[6]


def process_cpu_seconds(prefix: str = PREFIX) -> float:
    """CPU seconds used so far by the processes in the namespaces named with `prefix`, and by their reaped children."""
    total = 0
    for ns in namespaces(prefix):
        for pid in run("ip", "netns", "pids", ns, check=False).stdout.split():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += sum(int(x) for x in fields[11:15])   # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


def wait_listening(ns: str, ip: str, port: int = PORT, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if run("ip", "netns", "exec", ns, "bash", "-c", f"exec 3<>/dev/tcp/{ip}/{port}", check=False).returncode == 0:
            return
        time.sleep(0.2)
    raise FabricError(f"nothing listens on {ip}:{port} from {ns}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("down", help="remove every namespace (and its links and processes) named syfab-*")
    d.add_argument("--tag", default="", help="only those of one run tag")
    args = parser.parse_args(argv)
    if args.command == "down":
        prefix = PREFIX + (args.tag + "-" if args.tag else "")
        removed = down(prefix)
        for path in Path(tempfile.gettempdir()).glob(prefix + "*"):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
        print(f"removed {len(removed)} namespaces named {prefix}*")
    return 0


if __name__ == "__main__":
    sys.exit(main())
