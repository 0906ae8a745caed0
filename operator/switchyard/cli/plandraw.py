"""`switchyard plan -o svg|png`: the facility as a picture.

The WAN and the spine on top; below them each switch with its cache hosts and its
workers per fleet; between a switch and the spine its uplink, one line per direction,
coloured by the load competing TCP flows put on it (the fair share, what observed
traffic should match) against its capacity. Links the flows fill are drawn thick and
marked, the plan's bottleneck is named in the title with the target. Drawn with
matplotlib (switchyard[plot]); text stays text in the SVG, so it can be searched.
"""

from __future__ import annotations

import io
import textwrap
from typing import Sequence

from ..api import uplinkscore
from ..api.uplinkscore import IN, OUT
from ..planner import Plan
from ..planner.explain import link_words
from ..topology import Topology

MOST_SWITCHES = 40  # beyond this a row of boxes is unreadable; the rest are counted, not drawn


def _colour(cmap, fraction: float):
    return cmap(min(max(fraction, 0.0), 1.0))


def draw(result: Plan, topology: Topology, fleets: Sequence[str], title: str, fmt: str = "svg") -> bytes:
    """The picture of a plan, as SVG or PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot
    from matplotlib.patches import FancyBboxPatch

    matplotlib.rcParams["svg.fonttype"] = "none"      # text as <text>, not paths
    matplotlib.rcParams["svg.hashsalt"] = "switchyard"  # the same plan draws the same bytes
    cmap = matplotlib.colormaps["RdYlGn_r"]
    switches = topology.switches[:MOST_SWITCHES]
    width = max(8.0, 2.2 * len(switches))
    fig, ax = pyplot.subplots(figsize=(width, 6.5))
    ax.set_xlim(0, len(switches))
    bottom = 3.8 - 0.42 * (len(fleets) + 3) - 0.25  # below the box's last row (caches, fleets, routing, serves)
    ax.set_ylim(bottom - 0.2, 10)
    ax.axis("off")

    fair = result.fair
    full = set(fair.saturated) if fair else set()
    loads = {u.switch: u for u in result.uplinks}

    # The WAN and the spine.
    wan_full = "wan" in full or result.bottleneck == "wan"
    ax.add_patch(FancyBboxPatch((len(switches) / 2 - 0.9, 9.0), 1.8, 0.6, boxstyle="round,pad=0.05",
                                fc="#dde7f3", ec="black"))
    ax.text(len(switches) / 2, 9.3, f"origin (WAN {topology.wan_gbps:g} Gbps)", ha="center", va="center", fontsize=9)
    wan = ax.plot([len(switches) / 2] * 2, [8.2, 9.0], color="#c0392b" if wan_full else "#7f8c8d",
                  lw=4 if wan_full else 2)[0]
    if wan_full:
        wan.set_gid("bottleneck-wan")
        ax.text(len(switches) / 2 + 0.05, 8.6, "full", color="#c0392b", fontsize=8, fontweight="bold")
    ax.plot([0.1, len(switches) - 0.1], [8.2, 8.2], color="black", lw=3)
    ax.text(0.1, 8.35, "spine", fontsize=8)

    for i, switch in enumerate(switches):
        x = i + 0.5
        load = loads.get(switch.name)
        capacity = switch.uplink_gbps
        planned = dict(load.by_direction) if load is not None else {}
        for dx, direction in ((-0.15, IN), (0.15, OUT)):
            gbps = fair.uplinks[switch.name][direction] if fair else planned.get(direction, 0.0)
            link = uplinkscore.link(direction, switch.name)
            filled = link in full or (load is not None and uplinkscore.full(planned[direction], capacity))
            line = ax.plot([x + dx] * 2, [4.6, 8.2], color=_colour(cmap, gbps / capacity if capacity else 0),
                           lw=6 if filled else 3, solid_capstyle="butt")[0]
            line.set_gid(f"{'bottleneck-' if filled else ''}uplink-{direction}-{switch.name}")
            arrow = "↓" if direction == IN else "↑"
            label = f"{arrow} {gbps:.1f}/{capacity:g}" + (" full" if filled else "")
            ax.text(x + dx + (-0.04 if direction == IN else 0.04), 6.4, label, rotation=90, fontsize=7,
                    ha="right" if direction == IN else "left", va="center",
                    color="#c0392b" if filled else "black", fontweight="bold" if filled else "normal")
        ax.add_patch(FancyBboxPatch((i + 0.08, bottom), 0.84, 4.6 - bottom, boxstyle="round,pad=0.02", fc="#f4f6f7", ec="black"))
        ax.text(x, 4.3, switch.name, ha="center", va="center", fontsize=9, fontweight="bold")
        caches = sorted(h for by in result.placement.caches.values() for h in by.get(switch.name, ()))
        capped = [h for h in caches if any(f"serve:{pool}:{h}" in full or f"serve:{h}" in full
                                            for pool in result.placement.caches)]
        rows = [(f"caches: {len(caches)}" + (f" ({len(capped)} at cap)" if capped else ""),
                 "#c0392b" if capped else "black")]
        rows += [(f"{fleet}: {result.placement.workers.get(fleet, {}).get(switch.name, 0)} workers", "black")
                 for fleet in fleets]
        rows.append((f"routing: {result.routing.get(switch.name, 'local')}", "#555555"))
        if fair:
            rows.append((f"serves {fair.switch_served.get(switch.name, 0.0):.1f} Gbps", "#555555"))
        for j, (text, colour) in enumerate(rows):
            item = ax.text(x, 3.8 - 0.42 * j, text, ha="center", va="center", fontsize=7.5, color=colour)
            if colour == "#c0392b":
                item.set_gid(f"bottleneck-caches-{switch.name}")
    if len(topology.switches) > len(switches):
        ax.text(len(switches) - 0.1, 8.35, f"+{len(topology.switches) - len(switches)} switches not drawn",
                ha="right", fontsize=8)
    uplinks = [link_words(link) for link in sorted(full) if uplinkscore.link_direction(link) is not None]
    hosts = [link for link in full if link.startswith(("serve:", "nic:"))]
    named = "; ".join(uplinks[:4] + ([f"{len(hosts)} cache host(s) at their cap"] if hosts else [])) or "nothing"
    wrapped = textwrap.fill(title, width=int(width * 14))
    ax.set_title(f"{wrapped}\nbottleneck: {result.bottleneck}; full in the fair share: {named}\n"
                 "each uplink: ↓ into the switch, ↑ out of it, fair-share Gbps / capacity", fontsize=9, loc="left")
    fig.colorbar(matplotlib.cm.ScalarMappable(norm=matplotlib.colors.Normalize(0, 100), cmap=cmap), ax=ax,
                 fraction=0.02, pad=0.01, label="uplink load, % of capacity")
    out = io.BytesIO()
    fig.savefig(out, format=fmt, bbox_inches="tight", metadata={"Date": None} if fmt == "svg" else None, dpi=110)
    pyplot.close(fig)
    return out.getvalue()
