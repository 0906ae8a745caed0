"""Shaping and byte counters on the real-node network (e2e/realnodes.py), for the fabric bench on real kubelets.

realnodes.py puts every switch's bridge (brS) in one "fabric" namespace that routes
between switches; a node is a namespace whose eth0 is a veth into its bridge (nK on
the fabric side). This module shapes that network like the emulated fabric (e2e/fabric.py)
shapes its own, HTB on the egress of each direction, without changing how it is built:

    node NIC, out of the node    egress of eth0 in the node's namespace, a queue per flow (fabric.shape_host)
    node NIC, into the node      egress of nK in the fabric
    uplink, into switch S        egress of brS (what the fabric routes onto the bridge)
    uplink, out of switch S      brS's ingress redirected to ifbS, shaped on ifbS's egress
                                 (frames between two nodes of S are bridged, never pass up to brS)
    WAN                          an origin namespace `syr-<cluster>-wan` behind a veth `wan`, both ends shaped

Everything lives in the cluster's `syr-<cluster>-*` namespaces, so realnodes.down() removes
it; with no call to shape() the real-node network is exactly realnodes.py's.
Counters, after the shapers: brS's tx is the uplink in, ifbS's tx the uplink out (control traffic to
the API server included, it is small); a node's eth0 its NIC, the origin's eth0 the WAN.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import realnodes
from fabric import _bytes, shape_host, shaped_bytes, unshape
from fabric import shape as _shape

WAN_FABRIC_IP, WAN_ORIGIN_IP = "10.250.250.1", "10.250.250.2"


def shape(ns: str, dev: str, mbit: float, host: bool = False) -> None:
    """fabric.shape (a host's NIC out: fabric.shape_host) from scratch (HTB cannot change its default class in
    place: a second run re-shapes)."""
    unshape(ns, dev)
    (shape_host if host else _shape)(ns, dev, mbit)


@dataclasses.dataclass(frozen=True)
class Rates:
    """Mbit/s of every shaped link (each direction alike)."""

    uplink: dict[str, float]   # switch -> Mbit/s
    nic: dict[str, float]      # node -> Mbit/s
    wan: float


class RealFabric:
    """The shaped links and counters of one cluster's real nodes (after realnodes.Cluster.up)."""

    def __init__(self, real: realnodes.Cluster):
        self.real = real
        self.fabric = real.fabric
        self.wan_ns = f"{real.tag}-wan"
        # realnodes names node k's fabric-side veth n<k>, k counting from 1 in the order nodes came up.
        self.veth = {node: f"n{k}" for k, node in enumerate(real.nodes, start=1)}

    def bridge(self, switch: str) -> str:
        return f"br{self.real.switches[switch]}"

    def wan_up(self) -> None:
        """The origin's namespace, one veth from the fabric (where the routes to every node are)."""
        ip, ns = realnodes._ip, self.wan_ns
        if pathlib.Path(f"/run/netns/{ns}").exists():
            return
        ip("netns", "add", ns)
        ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", self.fabric, "link", "add", "wan", "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("-n", self.fabric, "addr", "add", f"{WAN_FABRIC_IP}/30", "dev", "wan")
        ip("-n", self.fabric, "link", "set", "wan", "up")
        ip("-n", ns, "addr", "add", f"{WAN_ORIGIN_IP}/30", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        # Routes to the nodes and pods only: with no way out, the client's reverse lookups fail at once
        # (a default route would carry them to the host's resolver, which never answers: 5 s each).
        for cidr in ("10.250.0.0/16", realnodes.POD_CIDR):
            ip("-n", ns, "route", "add", cidr, "via", WAN_FABRIC_IP)

    def switch_local_routes(self) -> list[tuple[str, str, str]]:
        """Pod subnets of the nodes on one's own switch, reached over the bridge.

        realnodes.py routes every pod subnet through the fabric: a reply from a host-network cache to a
        pod on the next node went up to the router and back down the same bridge, so it crossed (and was
        shaped as) the uplink both ways. A switch delivers that traffic itself; so must the bench's."""
        added = []
        for node, info in self.real.nodes.items():
            for other, peer in self.real.nodes.items():
                if other != node and peer["switch"] == info["switch"]:
                    realnodes._ip("-n", info["netns"], "route", "replace", peer["pod_subnet"], "via", peer["address"])
                    added.append((node, peer["pod_subnet"], peer["address"]))
        return added

    def shape(self, rates: Rates) -> None:
        run = realnodes._run
        for switch, mbit in rates.uplink.items():
            if switch not in self.real.switches:   # a switch without real nodes has no bridge
                continue
            bridge, ifb = self.bridge(switch), f"ifb{self.real.switches[switch]}"
            shape(self.fabric, bridge, mbit)
            if realnodes._ip("-n", self.fabric, "link", "show", ifb, check=False).returncode != 0:
                realnodes._ip("-n", self.fabric, "link", "add", ifb, "type", "ifb")
            realnodes._ip("-n", self.fabric, "link", "set", ifb, "up")
            run("tc", "-n", self.fabric, "qdisc", "replace", "dev", bridge, "handle", "ffff:", "ingress")
            run("tc", "-n", self.fabric, "filter", "replace", "dev", bridge, "parent", "ffff:", "pref", "1",
                "protocol", "all", "u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect",
                "dev", ifb)
            shape(self.fabric, ifb, mbit)
        for node, mbit in rates.nic.items():
            shape(self.real.nodes[node]["netns"], "eth0", mbit, host=True)
            shape(self.fabric, self.veth[node], mbit)
        shape(self.wan_ns, "eth0", rates.wan)
        shape(self.fabric, "wan", rates.wan)

    def counters(self) -> dict[str, tuple[int, int]]:
        """Bytes (out, in): "uplink:<switch>" (out of / into the switch), "host:<node>", "wan" (origin's side)."""
        out = {}
        for switch, index in self.real.switches.items():
            into, _ = _bytes(self.fabric, self.bridge(switch))   # sent onto the bridge, after its shaper
            # Out of the switch: what ifbS sent on, after the shaper (brS's rx counts before it, drops included);
            # without shaping, what brS received.
            shaped = realnodes._ip("-n", self.fabric, "link", "show", f"ifb{index}", check=False).returncode == 0
            out_of = _bytes(self.fabric, f"ifb{index}")[0] if shaped else _bytes(self.fabric, self.bridge(switch))[1]
            out[f"uplink:{switch}"] = (out_of, into)
        for node, info in self.real.nodes.items():
            out[f"host:{node}"] = _bytes(info["netns"], "eth0")
        out["wan"] = _bytes(self.wan_ns, "eth0")
        return out

    def wire_counters(self) -> dict[str, tuple[int, int]]:
        """Like counters(), but the bytes each direction's HTB sent: whole frames, a header per TCP segment.

        A shaper charges that, so a full link sends its rate in these; the interface counters see a GSO
        burst as one packet with one header and read a full link a few per cent low (e2e/fabric.py
        wire_counters). Unshaped devices count 0."""
        def sent(ns: str, dev: str) -> int:
            return shaped_bytes(ns, dev).get(dev, 0)
        out = {}
        for switch, index in self.real.switches.items():
            out[f"uplink:{switch}"] = (sent(self.fabric, f"ifb{index}"), sent(self.fabric, self.bridge(switch)))
        for node, info in self.real.nodes.items():
            out[f"host:{node}"] = (sent(info["netns"], "eth0"), sent(self.fabric, self.veth[node]))
        out["wan"] = (sent(self.wan_ns, "eth0"), sent(self.fabric, "wan"))
        return out

    def qdisc_drops(self) -> dict[str, int]:
        """Packets each uplink shaper (HTB and its FIFO) dropped so far: a saturated link drops, an idle one does not."""
        drops = {}
        for switch in self.real.switches:
            for direction, dev in (("in", self.bridge(switch)), ("out", f"ifb{self.real.switches[switch]}")):
                out = realnodes._run("tc", "-n", self.fabric, "-j", "-s", "qdisc", "show", "dev", dev,
                                     check=False).stdout
                drops[f"{switch}:{direction}"] = sum(q.get("drops", 0) for q in json.loads(out or "[]"))
        return drops
