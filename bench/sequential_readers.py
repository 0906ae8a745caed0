"""The closed queueing network (bench/closed_network.py) for the real-node bench's readers.

The fair share (planner/fairshare.py fair_share) treats each Dask worker as one fluid
stream that takes its files' split from every cache host at once. The bench's worker
runs `readers` sequential readers, each on one file (one host) at a time. As a closed
network: each worker's readers are one class; a reader's cap d is the worker's max-min
rate over every link but the cache hosts' serving (its NIC in, the uplinks its
cross-switch shares load) divided among its readers; the cache hosts are the
processor-sharing stations at their NIC's rate. The uplinks are folded into d, so
their own fluctuations are not modelled (the stations are the hosts only).

Two figures: `delivered` (closed_network.delivered: exact for one class or classes alike in
cap and shares, otherwise the many-reader fixed point) and `exact_pooled` (every reader in one class with the
classes' mean cap and reader-weighted shares, solved exactly by convolution).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from closed_network import Readers, delivered, exact
from switchyard.planner.fairshare import Stream, _cross, progressive_filling


def worker_caps(switch_of: Mapping[str, str], uplink_gbps: Mapping[str, float], nic_gbps: Mapping[str, float],
                streams: Sequence[tuple[str, float, Mapping[str, float]]]) -> tuple[float, ...]:
    """Each worker's max-min rate with the cache hosts' serving unlimited (fair_share's links otherwise)."""
    capacity = {f"{d}:{sw}": gbps for sw, gbps in uplink_gbps.items() for d in ("up_out", "up_in")}
    flows = []
    for node, demand, shares in streams:
        capacity[f"node_in:{node}"] = nic_gbps[node]   # workers on one node share its NIC
        use = {f"node_in:{node}": 1.0}
        for cache, share in shares.items():
            _cross(use, switch_of[cache], switch_of[node], share)
        flows.append(Stream(demand, use))
    return progressive_filling(capacity, flows).rates


def prediction(switch_of: Mapping[str, str], uplink_gbps: Mapping[str, float], nic_gbps: Mapping[str, float],
               streams: Sequence[tuple[str, float, Mapping[str, float]]], readers: int) -> dict:
    """Delivered Gbps of `readers` sequential readers per worker, as the closed network predicts."""
    caps = worker_caps(switch_of, uplink_gbps, nic_gbps, streams)
    stations = {f"serve:{c}": nic_gbps[c] for _, _, shares in streams for c in shares}
    classes = [Readers(readers, cap / readers, {f"serve:{c}": s for c, s in shares.items() if c != node})
               for (node, _, shares), cap in zip(streams, caps)]
    total = readers * len(classes)
    pooled_shares: dict[str, float] = {}
    for c in classes:
        for station, share in c.shares.items():
            pooled_shares[station] = pooled_shares.get(station, 0.0) + share / len(classes)
    pooled = Readers(total, sum(caps) / total, pooled_shares)
    return {"readers_per_worker": readers, "worker_caps_gbps": [round(c, 3) for c in caps],
            "delivered_gbps": round(sum(delivered(stations, classes)), 3),
            "exact_pooled_gbps": round(exact(stations, pooled), 3)}


def occupancy(reads: Sequence[Sequence], host: str, start: float, end: float) -> dict:
    """Of [start, end]: the fraction with at least one of `reads` ([reader, path, host, t0, t1, ok]) on `host`,
    and the mean number on it. A path whose fraction is below one carried nothing the rest of the time,
    whatever its link could have carried."""
    events = []
    for _, _, on, t0, t1, _ in reads:
        a, b = max(t0, start), min(t1, end)
        if on == host and b > a:
            events += [(a, 1), (b, -1)]
    busy = area = 0.0
    active, last = 0, start
    for t, step in sorted(events):
        busy += (t - last) * (active > 0)
        area += (t - last) * active
        active, last = active + step, t
    span = end - start
    return {"busy": round(busy / span, 3), "mean_readers": round(area / span, 2)}
