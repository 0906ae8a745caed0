"""A small emulated fabric moves real bytes, and one prediction holds (issue 14).

Two switches; one cache host on rack-a (switchyard's rendered config, real
xrootd); a reader node beside it and one behind rack-b, whose workers read
through the ring, so every byte they read crosses rack-a's uplink out and
rack-b's uplink in. rack-b's demand is twice the uplink, so the uplink
saturates: the flow model predicts it full and the local reader unaffected.
The full cases (and their spread) are in `make bench-fabric`; this checks
the set-up and one saturated uplink within a loose band, in about 30 s.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from fabric import ALLOWED_CONGESTION, PORT, PREFIX, Fabric, host_congestion, namespaces
from fabric import run as run_command
from fabric_scenario import fabric_for, layout, run

from switchyard.api.workerfleet import InlineFleet
from switchyard.api.xcachepool import InlinePool
from switchyard.planner.flow import evaluate
from switchyard.planner.model import FleetRequest, Placement, PoolRequest
from switchyard.topology import TopologyFile, snapshot

pytestmark = pytest.mark.integration

SCALE = 2.0          # Mbit/s per model Gbps: the 40 Gbps uplink runs at 80 Mbit/s
BAND = 0.15


def _require() -> None:
    missing = [c for c in ("ip", "tc", "xrootd", "setpriv") if shutil.which(c) is None]
    problem = f"missing {', '.join(missing)}: run hack/install-system-deps.sh" if missing else None
    if os.geteuid() != 0:
        problem = "the emulated fabric needs root (network namespaces)"
    if problem:
        pytest.fail(problem) if os.environ.get("CI") else pytest.skip(problem)


def _case():
    topo = TopologyFile.model_validate({"wanGbps": 100, "switches": [
        {"name": "rack-a", "uplinkGbps": 40, "nodes": [
            {"name": "cache", "nicGbps": 100, "cpu": 6, "memoryGiB": 24, "nvmeDisks": 2},
            {"name": "worker", "nicGbps": 50, "cpu": 64, "memoryGiB": 256}]},
        {"name": "rack-b", "uplinkGbps": 40, "nodes": [
            {"name": "worker", "nicGbps": 100, "cpu": 64, "memoryGiB": 256}]},
    ]})
    topology = snapshot(topo.node_infos(), topo.network())
    pool = InlinePool.model_validate({"name": "xcache", "serveGbps": 100, "missRatio": 0,
                                      "origin": {"host": "origin.example.org"}, "resources": {"cpu": "4", "memory": "8Gi"},
                                      "pfc": {"ramGiB": 1}})
    fleet = InlineFleet.model_validate({"name": "w", "replicas": 8, "cores": 8, "memoryGiB": 16, "readGbps": 10,
                                        "dask": {"createScheduler": True}})
    pools, fleets = [PoolRequest("xcache", pool)], [FleetRequest("w", fleet)]
    placement = Placement(caches={"xcache": {"rack-a": ("rack-a-cache",)}},
                          workers={"w": {"rack-a": 2, "rack-b": 8}}, hashed={"w": {"rack-b": 8}})
    return topology, pools, fleets, placement


def test_a_saturated_uplink_carries_what_the_flow_model_predicts():
    _require()
    topology, pools, fleets, placement = _case()
    flow = evaluate(topology, pools, fleets, placement)
    predicted = {u.switch: u for u in flow.uplinks}
    assert predicted["rack-a"].out_gbps == pytest.approx(40)       # the case is what it says: a full uplink
    the = layout(topology, pools, fleets, placement, {}, SCALE, [f"/f{i}.root" for i in range(8)])
    with fabric_for("t", topology, the, SCALE) as fabric:
        measured = run(fabric, the, pools, file_bytes=2 << 20, warmup=3, window=8, repeats=1, log=lambda _: None)
        window = measured.windows[0]
        assert measured.fill_bytes >= 8 * (2 << 20), "the cache did not fill from the origin"
        out_a, _ = window.mbit("uplink:rack-a")
        _, in_b = window.mbit("uplink:rack-b")
        local = window.mbit("host:rack-a-worker")[1]
        origin = window.mbit("wan")[0]
        shaped_out_a = window.wire_mbit("uplink:rack-a")[0]
        flows = _flows_served(fabric, "rack-a-cache")
        idle, moved = _held_until_released(fabric, f"root://{fabric.node('rack-a-cache').ip}:{PORT}//f0.root")
    assert not namespaces(PREFIX + "t-"), "teardown left namespaces behind"
    # Each of the 10 workers' streams has a connection of its own, and the cache host serves each in a
    # queue of its own (fabric.shape_host); one process's streams sharing a connection would be 2 queues.
    assert flows >= 10, flows
    assert idle < 20_000 and moved >= 2 << 20, (idle, moved)    # no read before the release, the file after
    assert out_a / SCALE == pytest.approx(predicted["rack-a"].out_gbps, rel=BAND)
    assert in_b / SCALE == pytest.approx(predicted["rack-b"].in_gbps, rel=BAND)
    assert local / SCALE == pytest.approx(20, rel=BAND)             # two workers at 10 Gbps beside the cache
    assert origin < 0.5, "warm caches read from the origin during the window"
    # The shaper's own count of a full link is its rate (frames, a header per segment); the interface
    # counters see fewer headers, so they read less.
    assert shaped_out_a / SCALE == pytest.approx(40, rel=0.08)
    assert shaped_out_a > out_a


def _flows_served(fabric: Fabric, node: str) -> int:
    """How many of the node's NIC-out queues (a flow each, fabric.shape_host) have sent a MiB or more."""
    qdiscs = json.loads(run_command("tc", "-n", fabric.node(node).ns, "-j", "-s", "qdisc", "show", "dev", "eth0").stdout)
    return sum(1 for q in qdiscs if q.get("kind") == "bfifo" and q.get("bytes", 0) >= 1 << 20)


def _held_until_released(fabric: Fabric, url: str) -> tuple[int, int]:
    """Bytes the cache sent while a started reader waited at the start line (2 s after it was ready), and once
    released until it had read `url`."""
    reader = fabric.start_readers("rack-b-worker", [([url], 0.0)], once=True)
    fabric.wait_readers_started(60)
    before = fabric.counters()["host:rack-a-cache"][0]
    time.sleep(2)
    idle = fabric.counters()["host:rack-a-cache"][0] - before
    fabric.release_readers()
    assert reader.wait(timeout=60) == 0
    moved = fabric.counters()["host:rack-a-cache"][0] - before
    fabric.stop_readers()
    return idle, moved


def test_a_run_picks_its_congestion_control_and_gives_the_host_its_list_back():
    _require()
    available = (Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split())
    # reno is always built in; a host on reno has cubic (the kernel's default) beside it
    other = next(c for c in ("cubic", "reno", "bbr") if c in available and c != host_congestion())
    before = ALLOWED_CONGESTION.read_text()
    fabric = Fabric.plan("cc", {"rack-a": 10.0}, [("n", "rack-a", 10.0, 10.0)], 10.0, congestion=other)
    with fabric:
        picked = run_command("ip", "netns", "exec", fabric.node("n").ns, "sysctl", "-n",
                             "net.ipv4.tcp_congestion_control").stdout.strip()
    assert picked == other
    assert ALLOWED_CONGESTION.read_text() == before
    assert not namespaces(PREFIX + "cc-")
