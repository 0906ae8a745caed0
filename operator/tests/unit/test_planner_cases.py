"""Builders of small planner inputs shared by the test_planner* modules (no tests here)."""

from __future__ import annotations

from switchyard.api.workerfleet import InlineFleet
from switchyard.api.xcachepool import InlinePool
from switchyard.planner import FleetRequest, PoolRequest
from switchyard.topology import Topology, TopologyFile, snapshot


def topology(switches: list[dict], wan: float = 400.0) -> Topology:
    """Switches as in a topology file: {"name", "uplinkGbps", "nodes": [node groups]}."""
    topo = TopologyFile.model_validate({"wanGbps": wan, "switches": switches})
    return snapshot(topo.node_infos(), topo.network())


def switch(name: str, uplink: float, *groups: dict) -> dict:
    return {"name": name, "uplinkGbps": uplink, "nodes": list(groups)}


def nodes(name: str, count: int = 1, cpu: int = 64, memory: int = 256, nic: float = 25, nvme: int = 0,
          pods: int = 110, labels: dict | None = None) -> dict:
    group = {"name": name, "count": count, "cpu": cpu, "memoryGiB": memory, "nicGbps": nic, "nvmeDisks": nvme,
             "pods": pods}
    if labels:
        group["labels"] = labels
    return group


def pool(name: str = "xc", serve: float = 45, miss: float = 0.0, **body) -> PoolRequest:
    spec = {"name": name, "serveGbps": serve, "missRatio": miss, "origin": {"host": "origin.example.org"},
            "resources": {"cpu": "4", "memory": "16Gi"}, "pfc": {"ramGiB": 4}, **body}
    return PoolRequest(name, InlinePool.model_validate(spec))


def fleet(name: str = "f", replicas: int = 10, cores: int = 4, memory: float = 8, read: float = 1.0, **body) -> FleetRequest:
    spec = {"name": name, "replicas": replicas, "cores": cores, "memoryGiB": memory, "readGbps": read,
            "dask": {"createScheduler": True}, **body}
    return FleetRequest(name, InlineFleet.model_validate(spec))


def total_workers(plan, fleet_name: str) -> int:
    return sum(plan.placement.workers.get(fleet_name, {}).values())


def describe(topo, pools, fleets) -> str:
    """A compact one-screen description, for hypothesis to print with a failing example."""
    lines = [f"wan {topo.wan_gbps:g}"]
    for s in topo.switches:
        hosts = ", ".join(f"{h.name}(cpu {h.cpu_millis // 1000}, mem {h.memory_bytes >> 30}Gi, pods {h.pods}, "
                          f"nic {h.nic_gbps:g}{', nvme' if 'switchyard.dev/nvme' in h.labels else ''}"
                          f"{', zone' if 'zone' in h.labels else ''})" for h in s.hosts)
        lines.append(f"{s.name} uplink {s.uplink_gbps:g}: {hosts}")
    for p in pools:
        b = p.body
        lines.append(f"pool {p.name}: serve {b.serve_gbps:g} miss {b.miss_ratio:g} max/switch {b.max_hosts_per_switch} "
                     f"selector {dict(b.node_selector)}")
    for f in fleets:
        b = f.body
        lines.append(f"fleet {f.name}: {b.replicas} x {b.cores} cores {b.memory_gib:g}Gi read {b.read_gbps:g} pool {b.pool}")
    return "\n".join(lines)
