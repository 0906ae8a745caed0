"""How an uplink is scored, in one place: its directions, a load's utilisation, a plan's peak, the tolerances.

A switch's uplink carries bytes both ways, IN towards the switch and OUT away
from it, each direction up to the uplink's capacity. An uplink is scored by its
busier direction: utilisation = max(in, out) / capacity. A plan's peak is the
highest utilisation of its uplinks, the planner's second objective (after the
Gbps). The planner's models bound the peak with `peak_rows`, its stages and the
re-plan's weighing compare peaks within UTIL_TOLERANCE; the plan contract
(`planner/model.py`), `switchyard plan`, the facility's status.plan, the metrics'
and dashboards' `direction` label and the drift check's subjects name the
directions with IN and OUT.

Pure arithmetic and names; imports nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

IN = "in"       # towards the switch
OUT = "out"     # away from the switch
DIRECTIONS = (IN, OUT)

# Peak utilisations this close count as equal in the planner's integer stages and when a re-plan is
# weighed against staying put, so a re-plan does not move pods for a gain nobody could measure.
UTIL_TOLERANCE = 0.005
# The stages' slack on the peak otherwise (absolute, on utilisation 0..1).
UTIL_SLACK = 1e-6
# A link counts as full at this share of its capacity: an uplink direction, and by the same share the
# WAN, a cache host's serving and the workers' demand.
SATURATED = 0.999


def busier(in_gbps: float, out_gbps: float) -> float:
    """The load an uplink is scored by: its busier direction's Gbps."""
    return max(in_gbps, out_gbps)


def utilisation(in_gbps: float, out_gbps: float, capacity_gbps: float) -> float:
    """max(in, out) / capacity (0 for an uplink without capacity)."""
    return busier(in_gbps, out_gbps) / capacity_gbps if capacity_gbps else 0.0


def headroom(in_gbps: float, out_gbps: float, capacity_gbps: float) -> float:
    """Gbps the busier direction can still take."""
    return capacity_gbps - busier(in_gbps, out_gbps)


def peak(loads: Iterable) -> float:
    """A plan's peak: the highest utilisation of its uplink loads (`.utilisation`), 0 with none."""
    return max((u.utilisation for u in loads), default=0.0)


def by_direction(in_gbps: float, out_gbps: float) -> tuple[tuple[str, float], ...]:
    """(direction, Gbps) of each direction, IN first."""
    return ((IN, in_gbps), (OUT, out_gbps))


def full(gbps: float, capacity_gbps: float) -> bool:
    """Whether one direction carrying `gbps` is full."""
    return bool(capacity_gbps) and gbps >= capacity_gbps * SATURATED


def link(direction: str, switch: str) -> str:
    """The fair share's name of one uplink direction (planner/fairshare.py): 'up_in:rack-a'."""
    return f"up_{direction}:{switch}"


def link_direction(name: str) -> str | None:
    """IN or OUT for the fair share's name of an uplink direction, None for another link's."""
    kind = name.partition(":")[0]
    return next((d for d in DIRECTIONS if kind == f"up_{d}"), None)


def peak_rows(util: int, capacity_gbps: float, inbound: Sequence[tuple[int, float]],
              outbound: Sequence[tuple[int, float]], in_gbps: bool = False) -> list[list[tuple[int, float]]]:
    """The peak as linear rows of a model, each to be held at or below 0: `util` (a variable) at least each
    loaded direction's Gbps (`inbound`, `outbound`: (variable, coefficient) terms) over the capacity.
    Per unit of capacity (util's coefficient -1), or with `in_gbps` the same row times the capacity."""
    rows = []
    for terms in (inbound, outbound):
        if not terms:
            continue
        if in_gbps:
            rows.append(list(terms) + [(util, -capacity_gbps)])
        else:
            scale = 1.0 / capacity_gbps
            rows.append([(v, c * scale) for v, c in terms] + [(util, -1.0)])
    return rows
