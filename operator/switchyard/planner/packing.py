"""Node-level witness: every planned pod on a node with room for it.

The solver decides counts per switch; the default scheduler binds the pods.
This packing proves the counts fit the switch's nodes (CPU, memory, pods and
NIC, cache pods included) and is what tests check capacities against. It fills
node by node in name order, biggest workers first, caches before workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .problem import Problem


@dataclass(frozen=True)
class Packing:
    nodes: Mapping[str, Mapping[str, int]]        # node -> pod kind ("cache:<pool>" or fleet) -> count
    shortfall: Mapping[tuple[int, int], int]      # (fleet, switch) -> workers that did not fit

    def pods_on(self, node: str) -> int:
        return sum(self.nodes.get(node, {}).values())


def pack(problem: Problem, cache_nodes: Mapping[tuple[int, int], tuple[str, ...]],
         workers: Mapping[tuple[int, int], int]) -> Packing:
    """cache_nodes: (pool, switch) -> nodes; workers: (fleet, switch) -> count."""
    out: dict[str, dict[str, int]] = {}
    shortfall: dict[tuple[int, int], int] = {}
    fleets = problem.fleets
    order = sorted(range(len(fleets)), key=lambda j: (-fleets[j].cpu_millis, -fleets[j].memory_bytes,
                                                      -fleets[j].read_gbps, fleets[j].name))
    for s, sw in enumerate(problem.switches):
        free: dict[str, list[float]] = {}
        for nc in sw.classes:
            for name in nc.nodes:
                free[name] = [nc.cpu_millis, nc.memory_bytes, nc.pods, nc.nic_gbps]
        for (p, ss), nodes in sorted(cache_nodes.items()):
            if ss != s:
                continue
            pool = problem.pools[p]
            for name in nodes:
                nc = next(c for c in sw.classes if name in c.nodes)
                room = free[name]
                room[0] -= pool.cpu_millis
                room[1] -= pool.memory_bytes
                room[2] -= 1
                room[3] -= problem.fill(p, nc)
                out.setdefault(name, {})[f"cache:{pool.name}"] = 1
        names = sorted(free)
        for j in order:
            need = workers.get((j, s), 0)
            f = fleets[j]
            size = (f.cpu_millis, f.memory_bytes, 1, f.read_gbps)
            for name in names:
                if not need:
                    break
                room = free[name]
                fit = int(min(room[i] // size[i] if i < 3 else (room[i] + 1e-9) // size[i] for i in range(4)))
                take = min(need, max(0, fit))
                if take:
                    for i in range(4):
                        room[i] -= take * size[i]
                    slot = out.setdefault(name, {})
                    slot[f.name] = slot.get(f.name, 0) + take
                    need -= take
            if need:
                shortfall[j, s] = need
    return Packing({n: dict(sorted(v.items())) for n, v in sorted(out.items())}, shortfall)
