"""The uplink score's one home (api/uplinkscore.py), and that no other module of the package spells it."""

from __future__ import annotations

import ast
import pathlib

import pytest

from switchyard.api import uplinkscore
from switchyard.api.uplinkscore import DIRECTIONS, IN, OUT
from switchyard.planner import UplinkLoad

PACKAGE = pathlib.Path(uplinkscore.__file__).resolve().parents[1]


def test_an_uplink_is_scored_by_its_busier_direction():
    assert uplinkscore.utilisation(30.0, 60.0, 80.0) == 0.75
    assert uplinkscore.utilisation(60.0, 30.0, 80.0) == 0.75
    assert uplinkscore.utilisation(5.0, 1.0, 0.0) == 0.0
    assert uplinkscore.headroom(30.0, 60.0, 80.0) == 20.0
    load = UplinkLoad("rack-1", 80.0, 60.0, 30.0)
    assert (load.utilisation, load.headroom, load.by_direction) == (0.75, 20.0, ((IN, 60.0), (OUT, 30.0)))


def test_a_plans_peak_is_its_highest_utilisation():
    loads = [UplinkLoad("a", 100.0, 10.0, 20.0), UplinkLoad("b", 40.0, 30.0, 0.0)]
    assert uplinkscore.peak(loads) == 0.75
    assert uplinkscore.peak([]) == 0.0


def test_a_direction_is_full_at_the_saturated_share():
    assert uplinkscore.full(79.95, 80.0) and not uplinkscore.full(79.8, 80.0)
    assert not uplinkscore.full(0.0, 0.0)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_the_fair_shares_uplink_names_round_trip(direction):
    assert uplinkscore.link_direction(uplinkscore.link(direction, "rack-1")) == direction
    assert uplinkscore.link(IN, "rack-1") != uplinkscore.link(OUT, "rack-1")


@pytest.mark.parametrize("name", ["serve:main:node-1", "nic:node-1", "wan", "node_in:node-1"])
def test_other_links_are_no_uplink(name):
    assert uplinkscore.link_direction(name) is None


@pytest.mark.parametrize("in_gbps", [False, True])
def test_the_peak_rows_hold_util_at_each_directions_share_of_capacity(in_gbps):
    # variables 0, 1 load the uplink inbound (half of 1 counts), 2 outbound; 3 is util
    rows = uplinkscore.peak_rows(3, 80.0, [(0, 1.0), (1, 0.5)], [(2, 1.0)], in_gbps=in_gbps)
    x = {0: 20.0, 1: 40.0, 2: 60.0}

    def holds(util: float) -> bool:
        return all(sum(c * {**x, 3: util}[v] for v, c in row) <= 1e-12 for row in rows)
    assert len(rows) == 2
    assert holds(0.75) and not holds(0.74)     # in 40, out 60 of 80
    assert uplinkscore.peak_rows(3, 80.0, [], [(2, 1.0)], in_gbps=in_gbps)[0][-1][0] == 3
    assert len(uplinkscore.peak_rows(3, 80.0, [], [], in_gbps=in_gbps)) == 0


def _spelled(path: pathlib.Path) -> list[str]:
    """Where `path` spells the score itself: a max over in/out Gbps or over utilisations, a fair-share
    uplink name."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "max":
            names = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            if {"in_gbps", "out_gbps"} <= names or "utilisation" in names:
                out.append(f"{node.lineno}: max over uplinks")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                node.value.startswith(tuple(f"up_{d}" for d in DIRECTIONS)):
            out.append(f"{node.lineno}: {node.value!r}")
    return out


def test_no_other_module_spells_the_score():
    spelled = {str(p.relative_to(PACKAGE)): s for p in sorted(PACKAGE.rglob("*.py"))
               if p.name != "uplinkscore.py" and (s := _spelled(p))}
    assert spelled == {}


def test_the_check_finds_a_spelled_score(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('peak = max(u.utilisation for u in plan.uplinks)\nlink = f"up_in:{switch}"\n'
                       "room = u.capacity_gbps - max(u.in_gbps, u.out_gbps)\n")
    assert len(_spelled(planted)) == 3
