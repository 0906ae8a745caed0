"""Real kubelet nodes beside kwok's simulated nodes in a local cluster.

Each real node is a network namespace holding its own containerd and a kubelet
v1.31.4 (own roots, sockets, cgroupRoot), plus kube-proxy, attached through a
veth to its switch's bridge. The switch bridges live in one "fabric" namespace
that routes between switches and, over one veth pair, to the host, where the
kwokctl control plane runs. A CoreDNS in the fabric namespace serves the
cluster's names to every real pod. Nothing gets a route out of the machine.

    10.250.0.1/30   host end of the host <-> fabric veth
    10.250.0.2/30   fabric end; 10.250.0.53 is the DNS server (on the fabric's lo)
    10.250.S.1/24   bridge of switch S (S = 1, 2, ...) in the fabric
    10.250.S.10+k   node k of switch S
    10.244.N.0/24   pod subnet of the N-th real node (bridge cni0 in its namespace)

The cluster must be made with `kwokctl_config()` (kwok then leaves nodes without
`kwok.x-k8s.io/node=fake` alone, the apiserver reaches kubelets by InternalIP
and its certificate names the `kubernetes` Service address).

Everything made here is named after the cluster (`syr-<cluster>-...`, state under
/var/lib/switchyard-realnodes/<cluster>), and `down()` finds it by that prefix,
not by what a process remembers, so it also cleans up after a run that died.

    python e2e/realnodes.py up --cluster sy-real --node real-a:rack-a:4 --node real-b:rack-b
    python e2e/realnodes.py up --cluster sy-real --topology e2e/topologies/real.yaml
    python e2e/realnodes.py down --cluster sy-real
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import ipaddress
import json
import os
import pathlib
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import zlib

import yaml

import localcluster

STATE_ROOT = pathlib.Path("/var/lib/switchyard-realnodes")
# Held while a cluster has real nodes: two clusters' nodes share the host's CNI results, containerd
# run directories and the saved sysctls, and broke each other when they overlapped. A second run waits.
HOST_LOCK = pathlib.Path("/run/lock/switchyard-realnodes.lock")
IMAGES = localcluster.CACHE / "images" / "oci"
REAL_LABEL = "switchyard.dev/real-node"
REAL_TAINT = {"key": REAL_LABEL, "value": "true", "effect": "NoSchedule"}
# What a pod needs to land on a real node.
TOLERATION = {"key": REAL_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
HOST_IP, FABRIC_IP, DNS_IP = "10.250.0.1", "10.250.0.2", "10.250.0.53"
POD_CIDR = "10.244.0.0/16"
# The apiserver's default service range is 10.0.0.0/24: `kubernetes` is 10.0.0.1.
SERVICE_IP = "10.0.0.1"
SERVICE_CIDR = "10.0.0.0/24"
PAUSE_IMAGE = "localhost/pause:3.10"
# The site registry of the harness (Cluster.start_registry): on the host, where the nodes reach it.
REGISTRY_PORT = 5000
REGISTRY = f"{HOST_IP}:{REGISTRY_PORT}"
# What kube-router's network policy controller makes in a node's namespace (tests only; see
# enforce_network_policies): its filter chains (and ipsets, which nothing else there makes).
KUBE_ROUTER_CHAINS = ("KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-")
# Kernel settings the kubelet changes for the whole machine (setupKernelTunables).
KUBELET_SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
                   "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")


def log(message: str) -> None:
    print(f"[realnodes] {message}", file=sys.stderr, flush=True)


@dataclasses.dataclass
class RealNode:
    name: str
    switch: str
    nvme_disks: int = 0
    nic_gbps: float = 25.0
    taints: tuple[dict, ...] = ()   # the topology group's, registered by the kubelet beside REAL_TAINT


def from_topology(topology_path: pathlib.Path) -> list[RealNode]:
    """The nodes of a topology file's `real: true` groups (localcluster leaves them to us)."""
    sys.path.insert(0, str(localcluster.REPO / "operator"))
    from switchyard.topology import load_topology

    topo = load_topology(yaml.safe_load(topology_path.read_text()) or {}, str(topology_path))
    return [RealNode(name, switch.name, nvme_disks=group.nvme_disks, nic_gbps=group.nic_gbps,
                     taints=tuple(t.to_wire() for t in group.taints))
            for switch in topo.switches for group in switch.nodes if group.real
            for name in group.node_names(switch.name)]


def kwokctl_config(path: pathlib.Path) -> pathlib.Path:
    """The kwokctl --config a cluster with real nodes must be created with."""
    doc = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokctlConfiguration",
        "options": {"kubeApiserverCertSANs": [SERVICE_IP]},
        "componentsPatches": [
            {"name": "kwok-controller", "extraArgs": [
                {"key": "manage-all-nodes", "value": "false"},
                {"key": "manage-nodes-with-annotation-selector", "value": "kwok.x-k8s.io/node=fake"}]},
            {"name": "kube-apiserver", "extraArgs": [
                {"key": "kubelet-preferred-address-types", "value": "InternalIP,Hostname"}]},
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _tag(cluster: str) -> str:
    return f"syr-{cluster}"


def _host_veth(cluster: str) -> str:
    return f"syr{zlib.crc32(cluster.encode()) & 0xffffff:06x}"  # <= 15 characters


def _run(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True, input=input)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run("ip", *args, check=check)


def _netns_exec(ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run("nsenter", f"--net=/run/netns/{ns}", "--", *args, check=check)


def _sysctl_in(ns: str, key: str, value: str) -> None:
    _netns_exec(ns, "sh", "-c", f"echo {value} > /proc/sys/{key}")


def _cgroup_mounts() -> list[pathlib.Path]:
    """Mount points of the cgroup v1 hierarchies."""
    out = []
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] == "cgroup":
            out.append(pathlib.Path(left.split()[4]))
    return out


class Cluster:
    """The real nodes of one local cluster."""

    def __init__(self, cluster: str, kubeconfig: pathlib.Path | None = None, registry: str | None = None):
        """`registry`: an image prefix on a registry served over plain HTTP (e.g. "10.250.0.1:5000/site",
        see start_registry) that the nodes' containerd pull every image from by reference, the pause
        image included; None: images come only from archives (import_images)."""
        self.cluster = cluster
        self.registry = registry
        self.tag = _tag(cluster)
        self.kubeconfig = kubeconfig or localcluster.kubeconfig_path(cluster)
        self.state = STATE_ROOT / cluster
        self.fabric = f"{self.tag}-fabric"
        self.bin = localcluster.CACHE / "bin"
        self.switches: dict[str, int] = {}
        self.nodes: dict[str, dict] = {}
        # Logs outlive down(), for a failed run's post-mortem.
        self.logs = localcluster.CACHE / "e2e-logs" / cluster / "realnodes"
        self._lock = None

    @property
    def pause_image(self) -> str:
        """The nodes' sandbox image: from the registry when they pull, else the imported archive's."""
        return f"{self.registry}/{PAUSE_IMAGE.split('/', 1)[1]}" if self.registry else PAUSE_IMAGE

    def _take_host(self) -> None:
        """Wait until no other cluster has real nodes on this host (HOST_LOCK), then hold it until down().
        A test may take it before up(), to see the machine as it is with no real nodes (another run's
        kubelets set machine-wide sysctls until their nodes are down)."""
        if self._lock is not None:
            return
        HOST_LOCK.parent.mkdir(parents=True, exist_ok=True)
        self._lock = open(HOST_LOCK, "a+")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another cluster's real nodes are up on this host; waiting for {HOST_LOCK}")
            fcntl.flock(self._lock, fcntl.LOCK_EX)

    # ---------------------------------------------------------------- network
    def _fabric_up(self) -> None:
        if pathlib.Path(f"/run/netns/{self.fabric}").exists():
            return
        veth = _host_veth(self.cluster)
        _ip("netns", "add", self.fabric)
        _ip("-n", self.fabric, "link", "set", "lo", "up")
        _ip("-n", self.fabric, "addr", "add", f"{DNS_IP}/32", "dev", "lo")
        _ip("link", "add", veth, "type", "veth", "peer", "name", "host", "netns", self.fabric)
        _ip("addr", "add", f"{HOST_IP}/30", "dev", veth)
        _ip("link", "set", veth, "up")
        _ip("-n", self.fabric, "addr", "add", f"{FABRIC_IP}/30", "dev", "host")
        _ip("-n", self.fabric, "link", "set", "host", "up")
        _ip("-n", self.fabric, "route", "add", "default", "via", HOST_IP)
        _sysctl_in(self.fabric, "net/ipv4/ip_forward", "1")
        # The host reaches node and pod addresses through the fabric (routes go with the veth).
        _ip("route", "add", "10.250.0.0/16", "via", FABRIC_IP)
        _ip("route", "add", POD_CIDR, "via", FABRIC_IP)

    def _switch(self, switch: str) -> int:
        if switch not in self.switches:
            index = len(self.switches) + 1
            self.switches[switch] = index
            bridge = f"br{index}"
            if _ip("-n", self.fabric, "link", "show", bridge, check=False).returncode != 0:
                _ip("-n", self.fabric, "link", "add", bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0")
                _ip("-n", self.fabric, "addr", "add", f"10.250.{index}.1/24", "dev", bridge)
                _ip("-n", self.fabric, "link", "set", bridge, "up")
        return self.switches[switch]

    def _node_network(self, node: RealNode, number: int) -> tuple[str, str, str]:
        """The node's namespace, address and pod subnet."""
        ns = f"{self.tag}-{node.name}"
        s = self._switch(node.switch)
        k = sum(1 for n in self.nodes.values() if n["switch"] == node.switch)
        address = f"10.250.{s}.{10 + k}"
        pod_subnet = f"10.244.{number}.0/24"
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", self.fabric, "link", "add", f"n{number}", "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("-n", self.fabric, "link", "set", f"n{number}", "master", f"br{s}", "up")
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "route", "add", "default", "via", f"10.250.{s}.1")
        _ip("-n", self.fabric, "route", "add", pod_subnet, "via", address)
        _sysctl_in(ns, "net/ipv4/ip_forward", "1")
        return ns, address, pod_subnet

    # ---------------------------------------------------------------- pieces
    def _api(self) -> tuple[str, str]:
        """The apiserver's address and port as the `kubernetes` Service's endpoints give them."""
        out = localcluster.kubectl(self.cluster, "get", "endpoints", "kubernetes", "-o", "json")
        subset = json.loads(out)["subsets"][0]
        return subset["addresses"][0]["ip"], str(subset["ports"][0]["port"])

    def _kubeconfig(self) -> pathlib.Path:
        """The admin kubeconfig, pointed at an address reachable from the namespaces."""
        ip, port = self._api()
        config = yaml.safe_load(self.kubeconfig.read_text())
        for entry in config["clusters"]:
            entry["cluster"]["server"] = f"https://{ip}:{port}"
        path = self.state / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        return path

    def _spawn(self, name: str, ns: str, args: list[str], mounts: pathlib.Path | None = None) -> subprocess.Popen:
        """`args` in network namespace `ns` (and in the mount namespace held at `mounts`, if given)."""
        logfile = (self.logs / f"{name}.log").open("ab")
        enter = ["nsenter", f"--net=/run/netns/{ns}"] + ([f"--mount={mounts}"] if mounts else [])
        return subprocess.Popen([*enter, "--", *args], stdout=logfile,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def _own_disks(self, node: str, paths: list[str], size: str) -> pathlib.Path:
        """A mount namespace of the node's own, with a tmpfs at each of `paths`: its containerd, kubelet and
        pods live in it, so two nodes of this one machine each have their own disk at the same path, as a
        site's hosts do (cache pools name one data path for all their hosts). The host's root mount is
        private, so nothing mounted there later reaches the node, and nothing the node mounts (volumes,
        rootfs, pod network namespaces) reaches the host. The namespace is held by a bind mount in the
        cluster's state, on a private mount of its own (the kernel refuses one bound where it would
        propagate into itself); down() drops it."""
        holder = self.state / "mounts"
        holder.mkdir(exist_ok=True)
        if not _is_mount(str(holder)):
            _run("mount", "--bind", str(holder), str(holder))
            _run("mount", "--make-private", str(holder))
        held = holder / node
        held.touch()
        _run("unshare", f"--mount={held}", "--propagation", "slave", "true")
        for path in paths:
            pathlib.Path(path).mkdir(parents=True, exist_ok=True)
            _run("nsenter", f"--mount={held}", "mount", "-t", "tmpfs", "-o", f"size={size},mode=0755",
                 f"{self.tag}-{node}-disk", path)
        return held

    def node_run(self, node: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """A command on the node, as its own processes see the machine: its network namespace, and its
        mounts if it has disks of its own."""
        held = self.state / "mounts" / node
        mounts = [f"--mount={held}"] if held.exists() else []
        return _run("nsenter", f"--net=/run/netns/{self.nodes[node]['netns']}", *mounts, "--", *args, check=check)

    def _dns_up(self, kubeconfig: pathlib.Path) -> None:
        corefile = self.state / "Corefile"
        corefile.write_text(f"""\
cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {{
    bind {DNS_IP}
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
    }}
    cache 5
}}
# No route out: every other name fails at once.
.:53 {{
    bind {DNS_IP}
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
""")
        self._spawn("coredns", self.fabric, [str(self.bin / "coredns"), "-conf", str(corefile)])

    def _containerd_config(self, node: str, root: pathlib.Path, pod_subnet: str) -> pathlib.Path:
        cni = root / "cni"
        cni.mkdir(parents=True, exist_ok=True)
        (cni / "10-switchyard.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": f"{self.tag}-{node}",
            "plugins": [
                {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "dataDir": str(root / "cni-ipam"),
                          "ranges": [[{"subnet": pod_subnet}]], "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }, indent=1))
        config = root / "containerd.toml"
        config.write_text(f"""\
version = 2
root = "{root}/containerd"
state = "{root}/containerd-state"
[grpc]
  address = "{root}/containerd.sock"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{self.pause_image}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{root}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
    max_conf_num = 1
""")
        if self.registry:
            # The registry by its host:port, over plain HTTP (containerd's default for it would be HTTPS).
            host = self.registry.split("/", 1)[0]
            hosts = root / "certs.d" / host
            hosts.mkdir(parents=True, exist_ok=True)
            (hosts / "hosts.toml").write_text(f"""\
server = "http://{host}"
[host."http://{host}"]
  capabilities = ["pull", "resolve"]
""")
            with config.open("a") as f:
                f.write(f"""\
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{root / 'certs.d'}"
""")
        return config

    def _cgroup_root(self, node: str) -> str:
        """Pre-create the node's cgroupRoot in every v1 hierarchy (cpuset copied from the parent)."""
        relative = f"{self.tag}/{node}"
        for mount in _cgroup_mounts():
            path = mount
            for part in relative.split("/"):
                parent, path = path, path / part
                path.mkdir(exist_ok=True)
                for key in ("cpuset.cpus", "cpuset.mems"):
                    if (path / key).exists() and not (path / key).read_text().strip():
                        (path / key).write_text((parent / key).read_text())
        return "/" + relative

    def _kubelet_config(self, node: RealNode, root: pathlib.Path, cgroup_root: str) -> pathlib.Path:
        resolv = root / "resolv.conf"
        resolv.write_text(f"nameserver {DNS_IP}\noptions timeout:1 attempts:1\n")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs", "cgroupRoot": cgroup_root, "cgroupsPerQOS": True,
            "containerRuntimeEndpoint": f"unix://{root}/containerd.sock",
            "failSwapOn": False, "readOnlyPort": 0, "port": 10250, "address": "0.0.0.0",
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "clusterDNS": [DNS_IP], "clusterDomain": "cluster.local", "resolvConf": str(resolv),
            "podLogsDir": str(root / "pod-logs"), "volumePluginDir": str(root / "volume-plugins"),
            # The images were imported by hand and can never be pulled again.
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "serializeImagePulls": False, "maxPods": 30,
            "registerWithTaints": [REAL_TAINT, *node.taints],
            "protectKernelDefaults": False,
        }
        path = root / "kubelet.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def _kube_proxy_config(self, node: str, root: pathlib.Path, kubeconfig: pathlib.Path) -> pathlib.Path:
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": node, "clusterCIDR": POD_CIDR, "mode": "iptables",
            # Replies from a Service backend on the same bridge come back through the node.
            "iptables": {"masqueradeAll": True},
            # 0: leave the machine-wide conntrack table size and timeouts alone.
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
            "metricsBindAddress": "127.0.0.1:10249", "healthzBindAddress": "127.0.0.1:10256",
        }
        path = root / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def _wait_socket(self, sock: pathlib.Path, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not sock.exists() or _run("ctr", "--address", str(sock), "version", check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"containerd did not listen on {sock} within {timeout:.0f}s")
            time.sleep(0.2)

    def import_images(self, names: list[str], nodes: list[str] | None = None) -> None:
        """Import OCI archives from `make images` (e.g. "operator", "xcache") into the nodes' containerd."""
        for node in nodes or list(self.nodes):
            sock = self.state / node / "containerd.sock"
            for name in names:
                archive = IMAGES / f"{name}.tar"
                if not archive.exists():
                    raise FileNotFoundError(f"{archive} is missing: run `make images`")
                _run("ctr", "--address", str(sock), "-n", "k8s.io", "images", "import", str(archive))

    def start_origin(self, files: dict[str, bytes], port: int = 1095, user: str = "xrootd",
                     netns: str | None = None, ip: str = FABRIC_IP) -> str:
        """A real XRootD origin in the fabric namespace (or `netns`, at `ip`) serving `files` (paths below /data);
        returns host:port.

        It runs as `user` (xrootd refuses root) from the host's Debian xrootd, like the
        integration tests' origins; its files and config live in the cluster's state.
        """
        root = self.state / "origin"
        for name, payload in files.items():
            path = root / "export" / name.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(payload)
        for sub in ("admin", "run"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        config = root / "origin.cfg"
        config.write_text(f"""\
xrd.port {port}
xrd.network nodnr
all.export /data
oss.localroot {root}/export
all.adminpath {root}/admin
all.pidpath {root}/run
""")
        _run("chown", "-R", user, str(root))
        netns = netns or self.fabric
        self._spawn("origin", netns, ["runuser", "-u", user, "--", "xrootd", "-I", "v4", "-c", str(config),
                                      "-n", "origin", "-l", str(root / "run" / "xrootd.log")])
        address = f"{ip}:{port}"
        deadline = time.monotonic() + 30
        while _netns_exec(netns, "xrdfs", address, "ls", "/data", check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the origin did not answer on {address}; see {root / 'run'}")
            time.sleep(0.3)
        return address

    def start_registry(self, port: int = REGISTRY_PORT, timeout: float = 30) -> str:
        """The CNCF distribution registry (built by `make tools`) as a site's registry, for the nodes to pull
        from: on the host, listening only on the host's end of the fabric veth (HOST_IP, after up()), so
        the nodes reach it through the fabric and nothing beyond this host and their namespaces can. Plain
        HTTP: each node's containerd has a hosts.toml for it when the Cluster was made with `registry`. Its
        config and storage live in the cluster's state: down() stops it (its command line names the state)
        and removes its storage with the rest. Returns host:port once its API answers."""
        binary = self.bin / "registry"
        if not binary.exists():
            raise FileNotFoundError(f"{binary} is missing: run hack/build-tools.sh")
        if self._lock is None:
            raise RuntimeError("start_registry() comes after up(): it listens on the fabric veth's host address")
        root = self.state / "registry"
        (root / "storage").mkdir(parents=True, exist_ok=True)
        address = f"{HOST_IP}:{port}"
        config = root / "config.yml"
        config.write_text(yaml.safe_dump({
            "version": 0.1, "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(root / "storage")}},
            "http": {"addr": address, "secret": secrets.token_hex(16)},
        }, sort_keys=False))
        logfile = (self.logs / "registry.log").open("ab")
        # No trace exporter: by default it would send spans to an OTLP collector on localhost.
        proc = subprocess.Popen([str(binary), "serve", str(config)], stdout=logfile, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, "OTEL_TRACES_EXPORTER": "none"})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + timeout
        while True:
            try:
                with opener.open(f"http://{address}/v2/", timeout=2) as response:
                    if response.status == 200:
                        return address
            except OSError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"the registry exited ({proc.returncode}); see {self.logs / 'registry.log'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the registry did not answer on {address} within {timeout:.0f}s")
            time.sleep(0.2)

    def images(self, node: str) -> list[str]:
        """The image references the node's containerd holds (namespace k8s.io)."""
        sock = self.state / node / "containerd.sock"
        return _run("ctr", "--address", str(sock), "-n", "k8s.io", "images", "ls", "-q").stdout.split()

    def _save_sysctls(self) -> None:
        saved = STATE_ROOT / "sysctls.json"
        if not saved.exists():  # the first cluster's snapshot is the machine's own
            saved.write_text(json.dumps({k: pathlib.Path("/proc/sys", k).read_text().strip()
                                         for k in KUBELET_SYSCTLS if pathlib.Path("/proc/sys", k).exists()}))
        marker = STATE_ROOT / "run-netns-was-mounted"
        if not marker.exists():  # `ip netns add` makes /run/netns a mount point the first time
            marker.write_text("yes" if _is_mount("/run/netns") else "no")

    # ---------------------------------------------------------------- up
    def up(self, nodes: list[RealNode], images: list[str] = ("pause",), switch_label: str = "switchyard.dev/switch",
           nvme_label: str = "switchyard.dev/nvme", nic_annotation: str = "switchyard.dev/nic-gbps",
           timeout: float = 120, disks: dict[str, list[str]] | None = None, disk_size: str = "256m") -> dict[str, dict]:
        """Start the nodes; return {name: {address, pod_subnet, netns, ready_seconds}}.

        `disks`: {node: [paths]} for nodes with disks of their own (a tmpfs of `disk_size` at each path,
        seen by that node alone: _own_disks); the other nodes see the host's filesystem as it is."""
        disks = disks or {}
        for tool in ("kubelet", "kube-proxy", "coredns"):
            if not (self.bin / tool).exists():
                raise FileNotFoundError(f"{self.bin / tool} is missing: run hack/build-tools.sh")
        for tool in ("containerd", "ctr", "runc", "nsenter", "iptables"):
            if not shutil.which(tool):
                raise FileNotFoundError(f"{tool} is missing: run hack/install-realnode-deps.sh")
        self._take_host()
        STATE_ROOT.mkdir(parents=True, exist_ok=True)
        self.state.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.logs, ignore_errors=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        self._save_sysctls()
        self._fabric_up()
        kubeconfig = self._kubeconfig()
        self._dns_up(kubeconfig)
        for number, node in enumerate(nodes, start=1):
            ns, address, pod_subnet = self._node_network(node, number)
            root = self.state / node.name
            root.mkdir(parents=True, exist_ok=True)
            self.nodes[node.name] = {"switch": node.switch, "address": address, "pod_subnet": pod_subnet, "netns": ns,
                                     "disks": list(disks.get(node.name, ()))}
            mounts = self._own_disks(node.name, disks[node.name], disk_size) if node.name in disks else None
            t0 = time.monotonic()
            self._spawn(f"{node.name}-containerd", ns, ["containerd", "--config",
                                                        str(self._containerd_config(node.name, root, pod_subnet))],
                        mounts)
            self._wait_socket(root / "containerd.sock")
            t1 = time.monotonic()
            self.import_images(list(images), [node.name])
            t2 = time.monotonic()
            labels = {switch_label: node.switch, REAL_LABEL: "true", "type": "real"}
            if node.nvme_disks:
                labels[nvme_label] = str(node.nvme_disks)
            cgroup_root = self._cgroup_root(node.name)
            self._spawn(f"{node.name}-kubelet", ns, [
                str(self.bin / "kubelet"), "--config", str(self._kubelet_config(node, root, cgroup_root)),
                "--kubeconfig", str(kubeconfig), "--root-dir", str(root / "kubelet"),
                "--cert-dir", str(root / "pki"), "--hostname-override", node.name, "--node-ip", address,
                "--node-labels", ",".join(f"{k}={v}" for k, v in labels.items())], mounts)
            self._spawn(f"{node.name}-kube-proxy", ns, [
                str(self.bin / "kube-proxy"), "--config", str(self._kube_proxy_config(node.name, root, kubeconfig))],
                mounts)
            self._wait_ready(node.name, timeout)
            t3 = time.monotonic()
            localcluster.kubectl(self.cluster, "annotate", "--overwrite", "node", node.name,
                                 f"{nic_annotation}={node.nic_gbps:g}")
            # containerd answering, images imported, kubelet start to node Ready.
            self.nodes[node.name].update(containerd_seconds=round(t1 - t0, 2), import_seconds=round(t2 - t1, 2),
                                         ready_seconds=round(t3 - t2, 2))
        (self.state / "nodes.json").write_text(json.dumps(self.nodes, indent=1))
        log(f"{len(nodes)} real nodes Ready: " + ", ".join(f"{n} ({v['address']})" for n, v in self.nodes.items()))
        return self.nodes

    # ---------------------------------------------------------------- network policies (tests only)
    def enforce_network_policies(self, binary: pathlib.Path, timeout: float = 60) -> dict[str, float]:
        """Run kube-router's network policy controller on every node, in the node's namespace: firewall
        only (no router, no service proxy), so the nodes' NetworkPolicies are enforced by iptables and
        ipsets in each node's namespace. For tests only (hack/build-kube-router.sh says why).

        Pods of one node share its cni0 bridge, and iptables sees bridged frames only with
        br_netfilter's bridge-nf-call-iptables on in that namespace (set here; it goes with the
        namespace). Pods on other nodes arrive routed through the fabric, in the node's FORWARD chain.
        Returns the seconds from start to the controller's chains in each node's filter table."""
        if not binary.exists():
            raise FileNotFoundError(f"{binary} is missing: run hack/build-kube-router.sh")
        kubeconfig = self.state / "kubeconfig"
        out = {}
        for node, info in self.nodes.items():
            ns = info["netns"]
            _sysctl_in(ns, "net/bridge/bridge-nf-call-iptables", "1")
            started = time.monotonic()
            self._spawn(f"{node}-kube-router", ns, [
                str(binary), "--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
                f"--hostname-override={node}", f"--kubeconfig={kubeconfig}",
                f"--service-cluster-ip-range={SERVICE_CIDR}", "--health-port=0", "--metrics-port=0"])
            deadline = time.monotonic() + timeout
            while "KUBE-ROUTER-FORWARD" not in _netns_exec(ns, "iptables-save", "-t", "filter", check=False).stdout:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"kube-router made no chains on {node} in {timeout:.0f}s; see {self.logs}")
                time.sleep(0.3)
            out[node] = round(time.monotonic() - started, 2)
        return out

    def stop_network_policies(self) -> dict[str, int]:
        """Stop the nodes' kube-routers and remove their chains, rules and ipsets (the nodes keep running);
        return how many lines of them each node's namespace held.

        Not with kube-router's own `--cleanup-config`: in v2.1.0 it runs each controller's cleanup on an
        empty controller. Tried here in each node's namespace: the policy controller's cleanup logged
        success and removed nothing (116 and 65 lines left), then the service proxy's tried `modprobe
        ip_vs` (a machine-wide change where modprobe exists) and panicked (nil pointer in
        deleteHairpinIptablesRules)."""
        _kill([pid for pid, cmd in _processes(str(self.state)) if "kube-router" in cmd])
        removed: dict[str, int] = {}
        for node, info in self.nodes.items():
            removed[node] = sum(1 for line in self.kube_router_leftovers() if line.startswith(f"{node}: "))
            _remove_kube_router_rules(info["netns"])
        return removed

    def kube_router_leftovers(self) -> list[str]:
        """kube-router's chains, rules and ipsets still in the nodes' namespaces."""
        found = []
        for node, info in self.nodes.items():
            rules = _netns_exec(info["netns"], "iptables-save", check=False).stdout
            found += [f"{node}: {line}" for line in rules.splitlines() if any(c in line for c in KUBE_ROUTER_CHAINS)]
            if shutil.which("ipset"):
                found += [f"{node}: ipset {name}" for name in
                          _netns_exec(info["netns"], "ipset", "list", "-n", check=False).stdout.split()]
        return found

    def _wait_ready(self, node: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            out = localcluster.kubectl(self.cluster, "get", "node", node, "-o",
                                       "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False)
            if out.strip() == "True":
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"real node {node} not Ready after {timeout:.0f}s; logs in {self.logs}")
            time.sleep(0.5)

    def memory_mib(self) -> dict[str, float]:
        """Resident memory of each node's kubelet, containerd, kube-proxy and shims, in MiB."""
        out: dict[str, float] = {}
        for pid, cmdline in _processes(str(self.state)):
            for node in self.nodes:
                if str(self.state / node) + "/" in cmdline or str(self.state / node) + " " in cmdline:
                    try:
                        rss = int(pathlib.Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
                    except (OSError, IndexError):
                        continue
                    out[node] = out.get(node, 0.0) + rss / 2**20
        return {k: round(v, 1) for k, v in out.items()}

    def pod_processes(self, node: str, marker: str) -> dict[int, float]:
        """{pid: resident MiB} of the node's pod processes whose command line holds `marker`."""
        out = {}
        for pid in _cgroup_pids(f"{self.tag}/{node}"):
            try:
                cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                pages = int(pathlib.Path(f"/proc/{pid}/statm").read_text().split()[1])
            except (OSError, IndexError):
                continue
            if marker in cmdline:
                out[pid] = round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
        return out

    def stop_node(self, node: str) -> int:
        """The node dies as a machine that loses power: cut off at its switch (the fabric's end of its veth
        down), then every process of it killed at once (SIGKILL: kubelet, containerd, kube-proxy, shims and
        its pods), so nothing of it writes again. Its Node and pods stay in the API server until the node
        controller gives up on them, as after a real death. Returns how many processes were killed;
        down() removes the rest."""
        number = self.nodes[node]["pod_subnet"].split(".")[2]     # its veth is n<number> (_node_network)
        _ip("-n", self.fabric, "link", "set", f"n{number}", "down")
        pids = {pid for pid, _ in _processes(str(self.state / node) + "/")} | set(_cgroup_pids(f"{self.tag}/{node}"))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(pids)

    # ---------------------------------------------------------------- down
    def down(self) -> list[str]:
        try:
            return down(self.cluster)
        finally:
            if self._lock is not None:
                self._lock.close()      # closing the file releases the lock
                self._lock = None


def _remove_kube_router_rules(ns: str) -> None:
    """Remove kube-router's chains and the rules jumping to them from a namespace's filter table, then
    its ipsets (Cluster.stop_network_policies says why not with its --cleanup-config)."""
    saved = _netns_exec(ns, "iptables-save", "-t", "filter", check=False).stdout
    if any(c in saved for c in KUBE_ROUTER_CHAINS):
        kept = "\n".join(line for line in saved.splitlines() if not any(c in line for c in KUBE_ROUTER_CHAINS))
        _run("nsenter", f"--net=/run/netns/{ns}", "--", "iptables-restore", "-w", "-T", "filter",
             input=kept + "\n", check=False)
    # No one else makes ipsets in a node's namespace (kube-proxy runs in iptables mode).
    if shutil.which("ipset") and _netns_exec(ns, "ipset", "list", "-n", check=False).stdout.strip():
        _netns_exec(ns, "ipset", "destroy", check=False)


def _processes(marker: str) -> list[tuple[int, str]]:
    out = []
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            out.append((int(proc.name), cmdline))
    return out


def _kill(pids: list[int], grace: float = 5.0) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(pathlib.Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.1)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in pids:  # reap children of this process (harness run in-process)
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def _cgroup_pids(tag: str) -> list[int]:
    pids = set()
    for mount in _cgroup_mounts():
        base = mount / tag
        if base.exists():
            for procs in base.rglob("cgroup.procs"):
                try:
                    pids.update(int(p) for p in procs.read_text().split())
                except OSError:
                    pass
    return sorted(pids)


def _netns_in_use() -> set[int]:
    """The inodes of the network namespaces that some process is in."""
    inodes = set()
    for proc in pathlib.Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                inodes.add((proc / "ns" / "net").stat().st_ino)
            except OSError:
                pass
    return inodes


def _cni_sandboxes(tag: str) -> set[str]:
    """The names of the pod network namespaces that the CNI results of a cluster's networks name."""
    names = set()
    results = pathlib.Path("/var/lib/cni/results")
    for cached in results.glob(f"{tag}-*") if results.exists() else []:
        try:
            interfaces = (json.loads(cached.read_text()).get("result") or {}).get("interfaces") or []
        except (OSError, ValueError):
            continue
        names.update(pathlib.Path(i["sandbox"]).name for i in interfaces if i.get("sandbox"))
    return names


def _unix_sockets(pid: int) -> list[str]:
    """Paths of the unix sockets a process listens on (a shim's socket file outlives it)."""
    inodes = set()
    try:
        for fd in pathlib.Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return []
    paths = []
    for line in pathlib.Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[6] in inodes and fields[7].startswith("/"):
            paths.append(fields[7])
    return paths


def down(cluster: str) -> list[str]:
    """Remove every trace of `cluster`'s real nodes; return what was removed (for the record)."""
    tag = _tag(cluster)
    state = STATE_ROOT / cluster
    removed: list[str] = []
    # 1. kubelets, kube-proxies, the DNS server and containerd: everything started with our state path.
    daemons = [pid for pid, cmd in _processes(str(state)) if "containerd-shim" not in cmd]
    shims = [pid for pid, cmd in _processes(str(state)) if "containerd-shim" in cmd]
    shim_sockets = [s for pid in shims for s in _unix_sockets(pid)]
    _kill(daemons)
    removed += [f"process {p}" for p in daemons]
    # 2. pod processes (in our cgroupRoot), then the shims, whose sockets they leave behind.
    for _ in range(20):
        pids = _cgroup_pids(tag)
        if not pids:
            break
        _kill(pids, grace=0.5)
        removed += [f"pod process {p}" for p in pids]
    _kill(shims, grace=2)
    removed += [f"shim {p}" for p in shims]
    for sock in shim_sockets:
        pathlib.Path(sock).unlink(missing_ok=True)
    # Nodes with disks of their own: their mount namespaces (and with them every mount their kubelet and
    # containerd made, pod network namespaces included), then the files those were mounted on.
    removed += _drop_own_mounts(state)
    # 3. pod network namespaces made by the CNI plugins of our nodes (their addresses are in POD_CIDR), now
    # that their pods are gone: every cluster's pods get addresses there, so one that a process is still in
    # is another cluster's live pod (down() of one cluster while another is up, as a run that waits for
    # the host lock does first, removed those once).
    # While another cluster has real nodes, only the namespaces our own nodes' CNI results name (a pod
    # being set up has a namespace no process is in yet).
    cidr = ipaddress.ip_network(POD_CIDR)
    in_use = _netns_in_use()
    others_up = STATE_ROOT.exists() and any(p.is_dir() and p.name != cluster for p in STATE_ROOT.iterdir())
    ours = _cni_sandboxes(tag)
    for ns in sorted(pathlib.Path("/run/netns").glob("cni-*")) if pathlib.Path("/run/netns").exists() else []:
        try:
            if ns.stat().st_ino in in_use or (others_up and ns.name not in ours):
                continue
        except OSError:
            continue
        out = _run("ip", "-n", ns.name, "-j", "addr", "show", "dev", "eth0", check=False).stdout
        try:
            addresses = [a["local"] for i in json.loads(out or "[]") for a in i.get("addr_info", [])]
        except ValueError:
            addresses = []
        if any(ipaddress.ip_address(a) in cidr for a in addresses if ":" not in a):
            _ip("netns", "delete", ns.name, check=False)
            removed.append(f"netns {ns.name}")
    # 4. mounts under our state (volumes, rootfs, shm), deepest first.
    for _ in range(3):
        mounts = [line.split()[4] for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines()
                  if line.split()[4].startswith(str(state) + "/")]
        if not mounts:
            break
        for mount in sorted(set(mounts), key=len, reverse=True):
            if _run("umount", mount, check=False).returncode != 0:
                _run("umount", "-l", mount, check=False)
            removed.append(f"mount {mount}")
    # 5. cgroups, leaves first.
    for mount in _cgroup_mounts():
        base = mount / tag
        if base.exists():
            for directory in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: len(p.parts),
                                    reverse=True) + [base]:
                try:
                    directory.rmdir()
                except OSError as exc:
                    removed.append(f"cgroup {directory} NOT removed: {exc}")
            removed.append(f"cgroup {base}")
    # 6. network namespaces (their veths, bridges, routes and iptables rules go with them); kube-router's
    # chains and ipsets first, on the nodes where the network policy test ran it.
    for ns in sorted(pathlib.Path("/run/netns").glob(f"{tag}-*")) if pathlib.Path("/run/netns").exists() else []:
        if ns.name != f"{tag}-fabric":
            _remove_kube_router_rules(ns.name)
    for ns in sorted(pathlib.Path("/run/netns").glob(f"{tag}-*")) if pathlib.Path("/run/netns").exists() else []:
        _ip("netns", "delete", ns.name, check=False)
        removed.append(f"netns {ns.name}")
    veth = _host_veth(cluster)
    if _ip("link", "show", veth, check=False).returncode == 0:
        _ip("link", "delete", veth, check=False)
        removed.append(f"link {veth}")
    # 7. files the kubelet and CNI keep outside our state: log links and CNI result caches.
    containers = pathlib.Path("/var/log/containers")
    if containers.exists():
        for link in containers.iterdir():
            if link.is_symlink() and os.readlink(link).startswith(str(state) + "/"):
                link.unlink()
                removed.append(f"log link {link.name}")
    # CNI caches results per network and sandbox: ours are named after our network or one of our sandboxes.
    sandboxes = {p.name for p in state.glob("*/containerd/io.containerd.grpc.v1.cri/sandboxes/*")}
    results = pathlib.Path("/var/lib/cni/results")
    for cached in results.iterdir() if results.exists() else []:
        if cached.name.startswith(f"{tag}-") or any(f"-{sandbox}-" in cached.name for sandbox in sandboxes):
            cached.unlink()
            removed.append(f"CNI result {cached.name}")
    # Their directories, when nothing else uses them (rmdir fails on a non-empty one).
    for directory in ("/var/lib/cni/results", "/var/lib/cni", "/run/containerd/s", "/run/containerd",
                      "/var/log/containers"):
        try:
            pathlib.Path(directory).rmdir()
        except OSError:
            pass
    # 8. the machine-wide sysctls the kubelet set, once no cluster has real nodes left.
    if state.exists():
        shutil.rmtree(state, ignore_errors=True)
        removed.append(f"state {state}")
    saved = STATE_ROOT / "sysctls.json"
    if saved.exists() and not any(p.is_dir() for p in STATE_ROOT.iterdir()):
        for key, value in json.loads(saved.read_text()).items():
            path = pathlib.Path("/proc/sys", key)
            if path.read_text().strip() != value:
                path.write_text(value)
                removed.append(f"sysctl {key} restored to {value}")
        saved.unlink()
    marker = STATE_ROOT / "run-netns-was-mounted"
    if marker.exists() and not any(p.is_dir() for p in STATE_ROOT.iterdir()):
        run = pathlib.Path("/run/netns")
        if marker.read_text() == "no" and _is_mount(str(run)) and not any(run.iterdir()):
            _run("umount", str(run), check=False)
            try:
                run.rmdir()
            except OSError:
                pass
            removed.append("mount /run/netns")
        marker.unlink()
    try:
        STATE_ROOT.rmdir()  # when no cluster has real nodes left
    except OSError:
        pass
    return removed


def _drop_own_mounts(state: pathlib.Path) -> list[str]:
    removed = []
    holder = state / "mounts"
    for held in sorted(holder.iterdir()) if holder.exists() else []:
        inside = _run("nsenter", f"--mount={held}", "cat", "/proc/self/mountinfo", check=False).stdout
        netns = [line.split()[4] for line in inside.splitlines() if line.split()[4].startswith("/run/netns/cni-")]
        _run("umount", str(held), check=False)
        for path in netns:
            if not _is_mount(path):     # on the host an empty file, which the node's mount covered
                pathlib.Path(path).unlink(missing_ok=True)
                removed.append(f"netns file {path}")
        removed.append(f"mount namespace {held.name}")
    if _is_mount(str(holder)):
        _run("umount", str(holder), check=False)
    nodes = state / "nodes.json"
    for node in json.loads(nodes.read_text()).values() if nodes.exists() else ():
        for path in node.get("disks", ()):
            try:
                pathlib.Path(path).rmdir()      # the empty directory the disk was mounted on
            except OSError:
                pass
    return removed


def _is_mount(path: str) -> bool:
    return any(line.split()[4] == path for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines())


def leftovers(cluster: str) -> list[str]:
    """What of `cluster`'s real nodes is still on the machine (empty after a clean down())."""
    tag, state = _tag(cluster), STATE_ROOT / cluster
    found = [f"process {pid}: {cmd[:100]}" for pid, cmd in _processes(str(state))]
    found += [f"mount {line.split()[4]}" for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines()
              if line.split()[4].startswith(str(state))]
    if pathlib.Path("/run/netns").exists():
        found += [f"netns {ns.name}" for ns in pathlib.Path("/run/netns").glob(f"{tag}-*")]
    found += [f"cgroup {m / tag}" for m in _cgroup_mounts() if (m / tag).exists()]
    if _ip("link", "show", _host_veth(cluster), check=False).returncode == 0:
        found.append(f"link {_host_veth(cluster)}")
    if state.exists():
        found.append(f"state {state}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start real nodes in a running local cluster")
    p_up.add_argument("--cluster", default="sy-real")
    p_up.add_argument("--node", action="append", default=[], help="NAME:SWITCH[:NVME_DISKS]")
    p_up.add_argument("--topology", help="a topology file: its `real: true` groups")
    p_up.add_argument("--image", action="append", default=None,
                      help="image archives to import (pause, operator, xcache, dask); default: all")
    p_down = sub.add_parser("down", help="remove a cluster's real nodes, by prefix")
    p_down.add_argument("--cluster", default="sy-real")
    p_config = sub.add_parser("kwokctl-config", help="write the kwokctl --config a real-node cluster needs")
    p_config.add_argument("path")
    args = parser.parse_args(argv)
    if args.command == "up":
        nodes = from_topology(pathlib.Path(args.topology)) if args.topology else []
        for spec in args.node:
            name, switch, *rest = spec.split(":")
            nodes.append(RealNode(name, switch, int(rest[0]) if rest else 0))
        if not nodes:
            parser.error("up needs --node or a --topology with `real: true` groups")
        real = Cluster(args.cluster)
        try:
            real.up(nodes, images=args.image or ["pause", "operator", "xcache", "dask"])
        except BaseException:
            log("start failed; cleaning up")
            down(args.cluster)
            raise
        print(json.dumps(real.nodes, indent=1))
    elif args.command == "down":
        for line in down(args.cluster):
            log(line)
        rest = leftovers(args.cluster)
        if rest:
            print("\n".join(rest), file=sys.stderr)
            return 1
    else:
        print(kwokctl_config(pathlib.Path(args.path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
