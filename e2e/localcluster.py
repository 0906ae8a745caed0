"""A real local Kubernetes control plane with simulated nodes, from a topology file.

kube-apiserver, kube-controller-manager, kube-scheduler and etcd run as local
binaries under `kwokctl --runtime binary`; kwok marks the pods the real
scheduler binds as Running. Nodes come from a topology file and carry the
switch and NVMe labels and the NIC annotation switchyard reads.

    python e2e/localcluster.py up --name switchyard-demo --topology e2e/topologies/mini.yaml
    python e2e/localcluster.py down --name switchyard-demo
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
import zlib

import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent
CACHE = pathlib.Path(os.environ.get("SWITCHYARD_CACHE", pathlib.Path.home() / ".cache" / "switchyard"))
# kwokctl's binary runtime binds fixed ports; each named cluster gets its own
# block, below Linux's ephemeral range (32768+) so that no outgoing connection
# can hold a port a component is about to bind.
PORT_BLOCKS = {"switchyard-demo": 21100, "switchyard-e2e": 21200, "switchyard-bench": 21300}


ETCD_PEER_OFFSET = 5  # the block: apiserver, etcd, controller-manager, scheduler, kwok controller, etcd peer


def port_base(name: str) -> int:
    """A block of 10 ports per cluster name, so clusters can run side by side."""
    return PORT_BLOCKS.get(name) or 22000 + zlib.crc32(name.encode()) % 900 * 10


def log(message: str) -> None:
    print(f"[localcluster] {message}", file=sys.stderr, flush=True)


def tools() -> pathlib.Path:
    """Build (or reuse) the pinned binaries; return their directory."""
    bin_dir = CACHE / "bin"
    needed = ["kwokctl", "kwok", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"]
    if all((bin_dir / n).exists() for n in needed):
        return bin_dir
    log("building the local cluster tools (first run only; about 10 minutes on 2 cores)")
    subprocess.run(["bash", str(REPO / "hack" / "build-tools.sh")], check=True, stdout=subprocess.DEVNULL)
    return bin_dir


def operator_command(python: str = sys.executable) -> list[str]:
    """`switchyard` as the operator image runs it: without Kubernetes client libraries.

    The image has none (switchyard reaches the API server with urllib3, and kopf then
    logs in by itself). The development venv has them for the benchmarks' baselines
    (dask-kubernetes, dask-gateway), and kopf imports them whenever they are importable,
    at ~40 MiB: hidden here, so that tests and benchmarks run the code, and measure the
    memory, of production.
    """
    hidden = ("kubernetes", "kubernetes_asyncio", "pykube")
    return [python, "-c", f"import sys; sys.modules.update(dict.fromkeys({hidden!r})); "
            "from switchyard.cli import main; sys.exit(main())"]


def kubeconfig_path(name: str) -> pathlib.Path:
    return CACHE / "clusters" / name / "kubeconfig"


def kubectl(name: str, *args: str, check: bool = True, capture: bool = True, input: str | None = None) -> str:
    result = subprocess.run([str(tools() / "kubectl"), "--kubeconfig", str(kubeconfig_path(name)), *args],
                            check=False, text=True, input=input,
                            stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE if capture else None)
    if check and result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout if capture else ""


def node_address(index: int) -> str:
    """The loopback address of the index-th simulated node (127.1.0.1, 127.1.0.2, ...)."""
    return f"127.1.{index // 250}.{index % 250 + 1}"


def node_manifests(topology_path: pathlib.Path) -> list[dict]:
    """Simulated Node objects for a topology file (errors name the field)."""
    sys.path.insert(0, str(REPO / "operator"))
    from switchyard.topology import load_topology

    topo = load_topology(yaml.safe_load(topology_path.read_text()) or {}, str(topology_path))
    # Groups marked `real: true` are started by realnodes.py, with a kubelet of their own.
    real = {name for switch in topo.switches for group in switch.nodes if group.real
            for name in group.node_names(switch.name)}
    nodes = []
    for index, info in enumerate(topo.node_infos()):
        if info.name in real:
            continue
        # Ephemeral storage as a kubelet reports its node's root disk: pods that request some (the workers'
        # jitter init container) schedule here as on a real node.
        resources = {"cpu": str(info.cpu_millis // 1000), "memory": f"{info.memory_bytes // 2**20}Mi",
                     "pods": str(info.pods), "ephemeral-storage": "100Gi"}
        nodes.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": info.name,
                "annotations": {"kwok.x-k8s.io/node": "fake", topo.nic_gbps_annotation: f"{info.nic_gbps:g}"},
                "labels": {**info.labels, "kubernetes.io/hostname": info.name, "kubernetes.io/os": "linux",
                           "kubernetes.io/arch": "amd64", "type": "kwok"},
            },
            "spec": {"taints": [t.to_wire() for t in info.taints]} if info.taints else {},
            # A loopback InternalIP per node: kwok gives host-network pods (the cache
            # hosts) their node's address, so a test can serve a host's exporter there.
            "status": {"allocatable": resources, "capacity": dict(resources), "phase": "Running",
                       "addresses": [{"type": "InternalIP", "address": node_address(index)},
                                     {"type": "Hostname", "address": info.name}],
                       "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "fake",
                                    "kubeProxyVersion": "fake"}},
        })
    return nodes


# Nodes with this annotation keep the status a test writes (kwok would set them
# Ready again at once): how a test marks a node NotReady.
MANUAL_STATUS = "switchyard.dev/simulated-status=manual"
# What the node controller taints a node with until it is Ready (and when its heartbeats stop).
NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def kwok_config(name: str, config: pathlib.Path | None) -> pathlib.Path:
    """The --config file for kwokctl: `config`'s documents plus MANUAL_STATUS for kwok."""
    docs = list(yaml.safe_load_all(config.read_text())) if config is not None else []
    kwok = next((d for d in docs if d and d.get("kind") == "KwokConfiguration"), None)
    if kwok is None:
        kwok = {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration", "options": {}}
        docs.insert(0, kwok)
    kwok.setdefault("options", {}).setdefault("disregardStatusWithAnnotationSelector", MANUAL_STATUS)
    # etcd's peer port from the cluster's block too: kwokctl has no flag for it and picks the first free
    # port counting down from 32767, so two clusters created at once both took 32766 and one etcd failed
    # to bind ("address already in use"; its kube-apiserver never came up).
    kwokctl = next((d for d in docs if d and d.get("kind") == "KwokctlConfiguration"), None)
    if kwokctl is None:
        kwokctl = {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokctlConfiguration", "options": {}}
        docs.append(kwokctl)
    kwokctl.setdefault("options", {}).setdefault("etcdPeerPort", port_base(name) + ETCD_PEER_OFFSET)
    path = CACHE / "clusters" / name / "kwokctl-config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def exists(name: str) -> bool:
    result = subprocess.run([str(tools() / "kwokctl"), "get", "clusters"], text=True, capture_output=True)
    return name in result.stdout.split()


def up(name: str, topology: pathlib.Path, fast: bool = False, config: pathlib.Path | None = None) -> pathlib.Path:
    """Start the cluster (or reuse a running one) and create the topology's nodes.

    `config`: a kwokctl `--config` file (KwokConfiguration / KwokctlConfiguration
    documents) used when the cluster is created, e.g. to raise the control plane's
    rate limits and parallelism for a benchmark; a reused cluster keeps its own.
    """
    bin_dir = tools()
    kubeconfig = kubeconfig_path(name)
    kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    base = port_base(name)
    if exists(name) and kubeconfig.exists() and _healthy(name):
        log(f"reusing running cluster {name}")
    else:
        if exists(name):
            down(name)
        log(f"starting cluster {name} (kube-apiserver on 127.0.0.1:{base})")
        args = [
            str(bin_dir / "kwokctl"), "create", "cluster", "--name", name, "--runtime", "binary",
            f"--kubeconfig={kubeconfig}",
            "--kube-apiserver-binary", str(bin_dir / "kube-apiserver"),
            "--kube-controller-manager-binary", str(bin_dir / "kube-controller-manager"),
            "--kube-scheduler-binary", str(bin_dir / "kube-scheduler"),
            "--etcd-binary", str(bin_dir / "etcd"),
            "--kwok-controller-binary", str(bin_dir / "kwok"),
            "--kube-apiserver-port", str(base),
            "--etcd-port", str(base + 1),
            "--kube-controller-manager-port", str(base + 2),
            "--kube-scheduler-port", str(base + 3),
            "--controller-port", str(base + 4),
            "--wait", "2m",
        ]
        if fast:
            args.append("--disable-qps-limits")
        args += ["--config", str(kwok_config(name, config))]
        result = subprocess.run(args, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"kwokctl create cluster failed:\n{result.stderr[-3000:]}")
    nodes = node_manifests(topology)
    if nodes:   # a topology of real nodes alone has none for kwok
        kubectl(name, "apply", "--server-side", "--force-conflicts", "--field-manager=localcluster", "-f", "-",
                input=yaml.safe_dump_all(nodes))
    _release_manual_status(name)
    _wait_nodes_ready(name, {n["metadata"]["name"] for n in nodes})
    log(f"{len(nodes)} simulated nodes ready; KUBECONFIG={kubeconfig}")
    return kubeconfig


def _healthy(name: str) -> bool:
    result = subprocess.run([str(tools() / "kubectl"), "--kubeconfig", str(kubeconfig_path(name)),
                             "get", "--raw", "/readyz"], capture_output=True, text=True, timeout=20)
    return result.returncode == 0


def _release_manual_status(name: str) -> None:
    """Hand every node a test held (MANUAL_STATUS) back to kwok. A held node gets no heartbeat: left held, the
    node controller marks it NotReady a minute later, in the middle of whichever test runs next."""
    key, value = MANUAL_STATUS.split("=")
    held = [n["metadata"]["name"] for n in json.loads(kubectl(name, "get", "nodes", "-o", "json"))["items"]
            if (n["metadata"].get("annotations") or {}).get(key) == value]
    for node in held:
        kubectl(name, "annotate", "node", node, f"{key}-")


def _wait_nodes_ready(name: str, names: set[str], timeout: float = 120) -> None:
    """Until every node is Ready and the node controller has lifted the taints it puts on a node that is not
    (yet) Ready: a node carrying node.kubernetes.io/not-ready a moment after it turned Ready admits no worker,
    and a plan made then leaves its switch out (an undisturbed run planned without rack-c that way)."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = json.loads(kubectl(name, "get", "nodes", "-o", "json"))["items"]
        ready = {n["metadata"]["name"] for n in nodes
                 if any(c.get("type") == "Ready" and c.get("status") == "True" for c in n["status"].get("conditions") or ())
                 and not any(t.get("key") in NOT_READY_TAINTS for t in n["spec"].get("taints") or ())}
        if names <= ready:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"nodes not Ready (or still tainted not-ready) after {timeout:.0f}s: {sorted(names - ready)[:5]}")
        time.sleep(1)


def install_crds(name: str) -> None:
    kubectl(name, "apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    kubectl(name, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(REPO / "crds"))
    # The OpenAPI document (what `kubectl explain` and strict validation read)
    # is published a few seconds after the CRDs are Established.
    deadline = time.monotonic() + 60
    while kubectl(name, "explain", "analysisfacility.spec.network", check=False) == "":
        if time.monotonic() > deadline:
            raise TimeoutError("the API server did not publish the switchyard schemas within 60s")
        time.sleep(1)


def down(name: str) -> None:
    subprocess.run([str(tools() / "kwokctl"), "delete", "cluster", "--name", name,
                    "--kubeconfig", str(kubeconfig_path(name))], check=False, capture_output=True)
    log(f"cluster {name} removed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start a cluster with the topology's nodes and the CRDs")
    p_up.add_argument("--name", default="switchyard-demo")
    p_up.add_argument("--topology", default=str(REPO / "e2e" / "topologies" / "mini.yaml"))
    p_up.add_argument("--fast", action="store_true", help="raise the control plane's client rate limits")
    p_up.add_argument("--config", default=None, help="a kwokctl --config file used when the cluster is created")
    p_down = sub.add_parser("down", help="remove a cluster")
    p_down.add_argument("--name", default="switchyard-demo")
    p_nodes = sub.add_parser("nodes", help="print the Node manifests of a topology file")
    p_nodes.add_argument("--topology", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            config = up(args.name, pathlib.Path(args.topology), fast=args.fast,
                        config=pathlib.Path(args.config) if args.config else None)
            install_crds(args.name)
            print(config)
        elif args.command == "down":
            down(args.name)
        else:
            yaml.safe_dump_all(node_manifests(pathlib.Path(args.topology)), sys.stdout, sort_keys=False)
    except (ValueError, RuntimeError, TimeoutError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
