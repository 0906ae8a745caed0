"""`switchyard plan` on files, as an admin runs it before touching a cluster."""

from __future__ import annotations

import argparse
import json
import pathlib

import pytest
import yaml

from switchyard.cli import plancli

REPO = pathlib.Path(__file__).resolve().parents[3]

TOPOLOGY = {
    "wanGbps": 100,
    "switches": [
        {"name": "rack-a", "uplinkGbps": 10, "nodes": [
            {"name": "cache", "count": 2, "nicGbps": 50, "cpu": 16, "memoryGiB": 64, "nvmeDisks": 4},
            {"name": "worker", "count": 2, "nicGbps": 25, "cpu": 64, "memoryGiB": 256}]},
        {"name": "rack-b", "uplinkGbps": 10, "nodes": [
            {"name": "worker", "count": 2, "nicGbps": 25, "cpu": 64, "memoryGiB": 256}]},
    ],
}


def facility(**spec_changes) -> dict:
    spec = {
        "routing": "auto",
        "network": {"wanGbps": 100, "switches": [{"name": "rack-a", "uplinkGbps": 10}, {"name": "rack-b", "uplinkGbps": 10}]},
        "cachePools": [{"name": "xcache", "serveGbps": 45, "missRatio": 0.1, "origin": {"host": "origin.example.org"},
                        "pfc": {"ramGiB": 4}}],
        "fleets": [{"name": "dask", "replicas": 20, "cores": 4, "memoryGiB": 8, "readGbps": 2,
                    "dask": {"createScheduler": True}}],
    }
    spec.update(spec_changes)
    return {"apiVersion": "switchyard.dev/v1alpha1", "kind": "AnalysisFacility", "metadata": {"name": "demo"}, "spec": spec}


def run(tmp_path, capsys, facility_doc, topology_doc=TOPOLOGY, *extra: str) -> tuple[int, str, str]:
    f, t = tmp_path / "facility.yaml", tmp_path / "topology.yaml"
    f.write_text(yaml.safe_dump(facility_doc) if isinstance(facility_doc, dict) else facility_doc)
    t.write_text(yaml.safe_dump(topology_doc) if isinstance(topology_doc, dict) else topology_doc)
    parser = argparse.ArgumentParser(prog="switchyard")
    plancli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["plan", "-f", str(f), "--topology", str(t), *extra])
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_the_table_shows_each_switch_the_totals_the_bound_and_the_gap(tmp_path, capsys):
    code, out, err = run(tmp_path, capsys, facility())
    assert code == 0, err
    header, rack_a, rack_b, total = out.splitlines()[:4]
    assert header.split() == ["SWITCH", "UPLINK", "CACHES", "W:dask", "RING", "ROUTING", "IN", "OUT", "UTIL",
                              "SERVE", "FAIR-IN", "FAIR-OUT"]
    assert rack_a.split()[:3] == ["rack-a", "10", "2"]
    assert rack_b.split()[:3] == ["rack-b", "10", "0"]
    assert total.split()[:4] == ["TOTAL", "20", "2", "20"]
    assert "bound" in out and "gap" in out and "bottleneck" in out


@pytest.mark.parametrize("fmt, parse", [("json", json.loads), ("yaml", yaml.safe_load)])
def test_json_and_yaml_carry_the_whole_plan(tmp_path, capsys, fmt, parse):
    code, out, _ = run(tmp_path, capsys, facility(), TOPOLOGY, "-o", fmt)
    assert code == 0
    doc = parse(out)
    assert [s["name"] for s in doc["switches"]] == ["rack-a", "rack-b"]
    assert sum(s["workers"].get("dask", 0) for s in doc["switches"]) == 20
    assert doc["switches"][0]["caches"] == {"xcache": ["rack-a-cache-0", "rack-a-cache-1"]}
    assert doc["predictedGbps"] <= doc["boundGbps"]
    assert doc["gapPercent"] == pytest.approx(100 * (1 - doc["predictedGbps"] / doc["boundGbps"]), abs=0.01)
    assert sum(doc["hashWeights"]["xcache"].values()) == pytest.approx(1)


def test_the_fair_share_is_printed_beside_the_optimum(tmp_path, capsys):
    """rack-b's 10 workers read 2 Gbps each over rack-a's 10 Gbps uplink when placed there: the LP and the
    fair share agree on the total, and the fair share says what each switch's caches serve."""
    code, out, _ = run(tmp_path, capsys, facility(), TOPOLOGY, "-o", "json", "--compare")
    doc = json.loads(out)
    assert 0 < doc["fairShareGbps"] <= doc["predictedGbps"] + 1e-3
    served = sum(s["serveGbps"] for s in doc["switches"])
    assert served == pytest.approx(doc["fairShareGbps"], abs=0.01)
    assert sum(doc["fairShare"]["servedByHost"].values()) == pytest.approx(served, abs=0.01)
    assert all(s["fairInGbps"] <= s["uplinkGbps"] + 1e-6 and s["fairOutGbps"] <= s["uplinkGbps"] + 1e-6
               for s in doc["switches"])
    assert all(0 < b["fairShareGbps"] <= b["predictedGbps"] + 1e-3 for b in doc["baselines"])
    code, out, _ = run(tmp_path, capsys, facility(), TOPOLOGY, "--compare")
    line = next(x for x in out.splitlines() if x.startswith("fair share"))
    assert f"{doc['fairShareGbps']:.1f} Gbps" in line and "link Gbps" in out
    assert all("fair share" in x for x in out.splitlines() if x.startswith("baseline"))


def test_a_full_uplink_behind_a_full_cache_host_gets_a_caution(tmp_path, capsys):
    """rack-b's 14 readers fill its 4 Gbps uplink from rack-a's one cache host, which its local readers fill
    too: TCP leaves such an uplink below the fair share (bench/notes/fabric-notes.md), so the plan says so."""
    topology = {"wanGbps": 100, "switches": [
        {"name": "rack-a", "uplinkGbps": 100, "nodes": [
            {"name": "cache", "count": 1, "nicGbps": 10, "cpu": 16, "memoryGiB": 64, "nvmeDisks": 4},
            {"name": "worker", "count": 1, "nicGbps": 25, "cpu": 16, "memoryGiB": 64}]},
        {"name": "rack-b", "uplinkGbps": 4, "nodes": [
            {"name": "worker", "count": 4, "nicGbps": 25, "cpu": 64, "memoryGiB": 256}]}]}
    doc = facility(network={"wanGbps": 100, "switches": [{"name": "rack-a", "uplinkGbps": 100},
                                                         {"name": "rack-b", "uplinkGbps": 4}]},
                   cachePools=[{"name": "xcache", "serveGbps": 6, "missRatio": 0.0,
                                "origin": {"host": "origin.example.org"}, "pfc": {"ramGiB": 4}}],
                   fleets=[{"name": "dask", "replicas": 20, "cores": 4, "memoryGiB": 8, "readGbps": 1,
                            "dask": {"createScheduler": True}}])
    code, out, _ = run(tmp_path, capsys, doc, topology)
    assert code == 0
    caution = [x for x in out.splitlines() if x.startswith("caution:")]
    assert len(caution) == 1 and "the rack-b uplink into the switch is full" in caution[0] and "(rack-a-cache)" in caution[0]
    code, out, _ = run(tmp_path, capsys, doc, topology, "-o", "json")
    assert json.loads(out)["fairShare"]["fullHostsBehind"] == {"up_in:rack-b": ["rack-a-cache"]}
    # the usual facility: nothing full behind a full host, no caution
    code, out, _ = run(tmp_path, capsys, facility())
    assert "caution:" not in out


def test_an_uplink_full_both_ways_gets_a_caution(tmp_path, capsys):
    """bench-fabric-real's facility: hashed readers on both racks fill both uplinks in both directions, where
    cache nodes on TCP BBR carried 0.75-0.86 of them (bench/notes/fabric-real-two-way.md): the plan says so."""
    topology = {"wanGbps": 10, "switches": [
        {"name": s, "uplinkGbps": 10, "nodes": [
            {"name": "cache", "count": 1, "nicGbps": 25, "cpu": 2, "memoryGiB": 8, "nvmeDisks": 1},
            {"name": "work", "count": 1, "nicGbps": 25, "cpu": 2, "memoryGiB": 8}]} for s in ("rack-a", "rack-b")]}
    doc = facility(routing="hashed", network={"wanGbps": 10, "switches": [{"name": "rack-a", "uplinkGbps": 10},
                                                                          {"name": "rack-b", "uplinkGbps": 10}]},
                   cachePools=[{"name": "xcache", "serveGbps": 25, "missRatio": 0.0,
                                "origin": {"host": "origin.example.org"}, "pfc": {"ramGiB": 1},
                                "resources": {"cpu": "1500m", "memory": "2Gi"}}],
                   fleets=[{"name": "dask", "replicas": 2, "cores": 1, "memoryGiB": 1, "readGbps": 25,
                            "dask": {"createScheduler": True}}])
    code, out, _ = run(tmp_path, capsys, doc, topology)
    assert code == 0
    both = [x for x in out.splitlines() if "full in both directions" in x]
    assert [x.split(" uplink ")[0] for x in both] == ["caution: the rack-a", "caution: the rack-b"], out
    code, out, _ = run(tmp_path, capsys, doc, topology, "-o", "json")
    assert json.loads(out)["fairShare"]["fullBothWays"] == ["rack-a", "rack-b"]
    code, out, _ = run(tmp_path, capsys, facility())      # the usual facility fills no uplink both ways
    assert "full in both directions" not in out


def test_a_file_list_gives_the_ring_split_of_those_files(tmp_path, capsys):
    """--files: ring readers take the split rendezvous hashing gives those paths, not the weights' average;
    the output says which split it used and how far it is from the weights."""
    from switchyard.planner import hashing

    hashed = facility(routing="hashed")
    code, out, _ = run(tmp_path, capsys, hashed, TOPOLOGY, "-o", "json")
    weights = json.loads(out)["hashWeights"]["xcache"]
    paths = [f"/store/f{i}.root" for i in range(12)]
    (tmp_path / "files.txt").write_text("\n".join(paths) + "\n\n")
    code, out, _ = run(tmp_path, capsys, hashed, TOPOLOGY, "-o", "json", "--files", str(tmp_path / "files.txt"))
    assert code == 0
    doc = json.loads(out)
    assert doc["fairShare"]["files"] == 12
    assert doc["fairShare"]["ringSplit"]["xcache"] == pytest.approx(hashing.split(paths, weights), abs=1e-6)
    code, out, _ = run(tmp_path, capsys, hashed, TOPOLOGY, "--files", str(tmp_path / "files.txt"))
    assert "split of 12 files" in out
    code, _, err = run(tmp_path, capsys, hashed, TOPOLOGY, "--files", str(tmp_path / "missing.txt"))
    assert code == 2 and "missing.txt" in err


def test_compare_judges_the_baselines_by_the_same_model(tmp_path, capsys):
    code, out, _ = run(tmp_path, capsys, facility(), TOPOLOGY, "-o", "json", "--compare")
    doc = json.loads(out)
    assert [b["planner"] for b in doc["baselines"]] == ["default-scheduler", "random(seed=0)"]
    assert all(b["predictedGbps"] <= doc["predictedGbps"] for b in doc["baselines"])


def test_an_error_in_the_facility_names_the_field(tmp_path, capsys):
    doc = facility()
    doc["spec"]["fleets"][0]["cores"] = 0
    code, out, err = run(tmp_path, capsys, doc)
    assert code == 2 and out == ""
    assert "facility.yaml: spec: fleets[0].cores:" in err


def test_an_error_in_the_topology_names_the_field(tmp_path, capsys):
    topo = yaml.safe_load(yaml.safe_dump(TOPOLOGY))
    topo["switches"][1]["nodes"][0]["nicGbps"] = -1
    code, _, err = run(tmp_path, capsys, facility(), topo)
    assert code == 2
    assert "topology.yaml: switches[1].nodes[0].nicGbps:" in err


def test_broken_yaml_and_the_wrong_kind_are_refused(tmp_path, capsys):
    code, _, err = run(tmp_path, capsys, "spec: [unclosed")
    assert code == 2 and "not valid YAML" in err
    code, _, err = run(tmp_path, capsys, {**facility(), "kind": "WorkerFleet"})
    assert code == 2 and "kind: expected an AnalysisFacility" in err


def test_a_valid_but_impossible_facility_exits_1_with_the_reason(tmp_path, capsys):
    topo = {"switches": [{"name": "rack-a", "uplinkGbps": 10, "nodes": [{"name": "worker", "cpu": 64}]},
                         {"name": "rack-b", "uplinkGbps": 10}]}
    code, _, err = run(tmp_path, capsys, facility(), topo)
    assert code == 1
    assert "NoEligibleCacheNodes" in err


def test_nodes_on_undeclared_switches_are_named_in_a_warning(tmp_path, capsys):
    topo = yaml.safe_load(yaml.safe_dump(TOPOLOGY))
    topo["switches"].append({"name": "rack-z", "uplinkGbps": 10, "nodes": [{"name": "worker"}]})
    code, _, err = run(tmp_path, capsys, facility(), topo)
    assert code == 0
    assert "rack-z-worker" in err


def test_from_cluster_without_a_reachable_cluster_says_so(tmp_path, capsys):
    f = tmp_path / "facility.yaml"
    f.write_text(yaml.safe_dump(facility()))
    parser = argparse.ArgumentParser(prog="switchyard")
    plancli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["plan", "-f", str(f), "--from-cluster", "--kubeconfig", str(tmp_path / "missing")])
    assert args.func(args) == 2
    assert "--from-cluster: cannot list nodes" in capsys.readouterr().err


def test_a_plan_not_proven_optimal_says_so_with_its_gap(tmp_path, capsys, monkeypatch):
    import dataclasses

    code, out, _ = run(tmp_path, capsys, facility(), TOPOLOGY, "-o", "json")
    assert code == 0 and json.loads(out)["optimal"] is True
    code, out, _ = run(tmp_path, capsys, facility())
    assert "not proven optimal" not in out
    real = plancli.plan
    monkeypatch.setattr(plancli, "plan", lambda *a, **kw: dataclasses.replace(real(*a, **kw), optimal=False))
    code, out, _ = run(tmp_path, capsys, facility())
    assert code == 0 and "not proven optimal" in out and "gap" in out
    code, out, _ = run(tmp_path, capsys, facility(), TOPOLOGY, "-o", "json")
    assert json.loads(out)["optimal"] is False


# ---------------------------------------------------------------- an admin's mistakes (issue 27)

@pytest.mark.parametrize("section,items", [
    ("fleets", lambda spec: spec["fleets"] + [dict(spec["fleets"][0], replicas=3)]),
    ("cachePools", lambda spec: spec["cachePools"] + [dict(spec["cachePools"][0])]),
])
def test_two_children_of_one_name_are_refused_naming_the_list(tmp_path, capsys, section, items):
    doc = facility()
    doc["spec"][section] = items(doc["spec"])
    code, out, err = run(tmp_path, capsys, doc)
    assert (code, out) == (2, "")
    assert f"{section}: duplicate name" in err and "Traceback" not in err


def test_two_switches_of_one_name_are_refused(tmp_path, capsys):
    doc = facility()
    doc["spec"]["network"]["switches"].append({"name": "rack-a", "uplinkGbps": 40})
    code, _, err = run(tmp_path, capsys, doc)
    assert code == 2 and "spec: network: switches: duplicate name rack-a" in err


@pytest.mark.parametrize("metadata,field", [
    ({}, "metadata.name: missing"),
    ({"name": "Demo_1"}, "metadata.name: 'Demo_1' is not a facility name"),
    ({"name": "a" * 41}, "is not a facility name: at most 40 characters"),
    ({"name": "demo", "namespace": "Not A Namespace"}, "metadata.namespace:"),
])
def test_a_name_kubernetes_refuses_is_refused_before_planning(tmp_path, capsys, metadata, field):
    code, out, err = run(tmp_path, capsys, {**facility(), "metadata": metadata})
    assert (code, out) == (2, "") and field in err


@pytest.mark.parametrize("spec", ["[1, 2]", "just words", "null"])
def test_a_spec_that_is_not_a_mapping_is_refused(tmp_path, capsys, spec):
    code, _, err = run(tmp_path, capsys, f"kind: AnalysisFacility\nmetadata: {{name: demo}}\nspec: {spec}\n")
    assert code == 2 and "spec: expected a mapping" in err


@pytest.mark.parametrize("change,field", [
    (lambda s: s["fleets"][0].update(replicas=-1), "fleets[0].replicas"),
    (lambda s: s["fleets"][0].update(cores="four"), "fleets[0].cores"),
    (lambda s: s.update(routing="nearest"), "routing"),
    (lambda s: s["network"].update(switches={"rack-a": 10}), "network.switches"),
    (lambda s: s["network"].update(uplinks=[]), "network.uplinks"),
    (lambda s: s.pop("network"), "network"),
])
def test_typos_negatives_wrong_types_and_missing_sections_name_the_field(tmp_path, capsys, change, field):
    doc = facility()
    change(doc["spec"])
    code, _, err = run(tmp_path, capsys, doc)
    assert code == 2 and f"facility.yaml: spec: {field}" in err and "Traceback" not in err, err


def test_a_yaml_syntax_error_gives_the_line(tmp_path, capsys):
    code, _, err = run(tmp_path, capsys, "kind: AnalysisFacility\nspec: {network: [\n")
    assert code == 2 and "facility.yaml: line 3, column 1: not valid YAML" in err


def test_a_switch_label_the_topology_does_not_use_is_an_error_naming_both(tmp_path, capsys):
    doc = facility()
    doc["spec"]["network"]["switchLabel"] = "example.org/rack"
    code, _, err = run(tmp_path, capsys, doc)
    assert code == 2
    assert "switchyard.dev/switch" in err and "example.org/rack" in err and "NVMe" not in err


def test_a_nic_left_out_is_a_warning_naming_the_default(tmp_path, capsys):
    topo = yaml.safe_load(yaml.safe_dump(TOPOLOGY))
    del topo["switches"][1]["nodes"][0]["nicGbps"]
    code, out, err = run(tmp_path, capsys, facility(), topo, "-o", "json")
    assert code == 0
    assert "switches[1].nodes[0] (rack-b/worker, 2 node(s)): no nicGbps: 25 Gbps assumed" in err
    assert any("no nicGbps" in w for w in json.loads(out)["warnings"])


def test_uplinks_and_wan_that_differ_between_the_files_are_warnings_naming_both(tmp_path, capsys):
    topo = {**yaml.safe_load(yaml.safe_dump(TOPOLOGY)), "wanGbps": 40}
    topo["switches"][0]["uplinkGbps"] = 80
    code, out, err = run(tmp_path, capsys, facility(), topo, "-o", "json")
    assert code == 0
    assert "uplink of rack-a: the facility says 10 Gbps" in err and "says 80 Gbps: the plan uses the facility's" in err
    assert "WAN: the facility says 100 Gbps" in err and "says 40 Gbps" in err
    assert json.loads(out)["switches"][0]["uplinkGbps"] == 10


def test_a_switch_without_nodes_and_a_facility_without_pools_are_warned_of(tmp_path, capsys):
    doc = facility()
    doc["spec"]["network"]["switches"].append({"name": "rack-z", "uplinkGbps": 10})
    code, _, err = run(tmp_path, capsys, doc)
    assert code == 0 and "switch rack-z: no schedulable node carries switchyard.dev/switch=rack-z" in err
    doc = facility(cachePools=[])
    doc["spec"]["fleets"][0]["dask"] = {"createScheduler": True}
    code, _, err = run(tmp_path, capsys, doc)
    assert "spec.cachePools is empty" in err


def test_the_usual_facility_plans_without_warnings(tmp_path, capsys):
    code, out, err = run(tmp_path, capsys, facility(), TOPOLOGY, "-o", "json")
    assert code == 0 and err == "" and json.loads(out)["warnings"] == []


def test_the_target_is_set_against_the_prediction_with_what_binds_it(tmp_path, capsys):
    code, out, _ = run(tmp_path, capsys, facility(targetGbps=500))
    assert code == 0
    last = out.strip().splitlines()[-1]
    assert last.startswith("target 500 Gbps, predicted ") and "short" in last, last
    code, out, _ = run(tmp_path, capsys, facility(targetGbps=1), TOPOLOGY, "-o", "json")
    assert json.loads(out)["target"].startswith("target 1 Gbps: met (predicted ")


def test_the_example_facility_says_why_48_of_200_and_what_to_change(capsys):
    from switchyard.cli import main

    assert main(["plan", "-f", str(REPO / "examples/facility.yaml"), "--topology", str(REPO / "e2e/topologies/mini.yaml")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == ("target 200 Gbps, predicted 48 Gbps (152 short): the workers' demand binds (24 workers read 48 Gbps): "
                    "raise the fleets' replicas or readGbps (about 76 more workers at 2 Gbps each)")


def test_a_reader_that_stops_early_ends_the_output_quietly():
    import subprocess
    import sys

    for verb, first in (("plan", "planner:"), ("render", "apiVersion:")):
        command = (f"{sys.executable} -m switchyard.cli {verb} -f {REPO}/examples/facility.yaml "
                   f"--topology {REPO}/e2e/topologies/mini.yaml {'-o yaml ' if verb == 'plan' else ''}| head -1")
        done = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True,
                              cwd=REPO / "operator")
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        assert done.stdout.startswith(first)


@pytest.mark.parametrize("text,message", [
    ("kind: AnalysisFacility\nspec: [\n", "line 3, column 1: not valid YAML"),
    ("kind: AnalysisFacility\nspec: {}\n", "metadata.name: missing"),
    ("kind: AnalysisFacility\nmetadata: {name: demo}\nspec: {network: {switches: [{name: a, uplinkGbps: 1}, "
     "{name: a, uplinkGbps: 2}]}}\n", "switches: duplicate name a"),
])
def test_render_refuses_the_same_mistakes_in_one_line(tmp_path, capsys, text, message):
    from switchyard.cli import main

    f = tmp_path / "facility.yaml"
    f.write_text(text)
    assert main(["render", "-f", str(f), "--topology", str(REPO / "e2e/topologies/mini.yaml")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err and len(err.strip().splitlines()) == 1, err


def test_the_output_names_links_as_an_admin_does_and_rounds_for_people(tmp_path, capsys):
    """A facility whose uplinks fill: every full link in words with its direction, no internal id, no 303.999."""
    import math

    doc = facility(routing="hashed", targetGbps=300)
    doc["spec"]["network"]["switches"] = [{"name": "rack-a", "uplinkGbps": 2}, {"name": "rack-b", "uplinkGbps": 2}]
    code, out, _ = run(tmp_path, capsys, doc)
    assert code == 0
    assert not any(token in out for token in ("up_in:", "up_out:", "serve:", "nic:")), out
    assert "uplink into the switch" in out or "uplink out of the switch" in out
    summary = next(x for x in out.splitlines() if x.startswith("predicted "))
    assert all(len(n.split(".")[1]) <= 2 for n in summary.replace("%", " ").split() if n.replace(".", "").isdigit() and "." in n), summary
    code, out, _ = run(tmp_path, capsys, doc, TOPOLOGY, "-o", "json")
    weights = [w for pool in json.loads(out)["hashWeights"].values() for w in pool.values()]
    assert all(math.copysign(1, w) > 0 for w in weights), weights


def test_the_readme_shows_the_example_plan_as_the_command_prints_it(capsys):
    from switchyard.cli import main

    assert main(["plan", "-f", str(REPO / "examples/facility.yaml"), "--topology", str(REPO / "e2e/topologies/mini.yaml")]) == 0
    readme = (REPO / "README.md").read_text()
    marker = "switchyard plan -f examples/facility.yaml --topology e2e/topologies/mini.yaml\n```\n\nprints:\n\n```\n"
    block = readme[readme.index(marker) + len(marker):]
    assert block[:block.index("```\n")] == capsys.readouterr().out


@pytest.mark.parametrize("case,marked", [("chicago", ["bottleneck-uplink-in-rack-6", "bottleneck-caches-rack-1"]),
                                         ("nebraska", [])])
def test_the_picture_names_every_switch_and_marks_what_is_full(capsysbinary, case, marked):
    """The bench's Chicago-like facility fills rack-6's uplink inward and every cache host; the Nebraska-like one
    is bound by its workers' demand: nothing is marked full, and the title says so."""
    import re

    from switchyard.cli import main

    facility_file, topology_file = REPO / f"bench/topologies/{case}-facility.yaml", REPO / f"bench/topologies/{case}.yaml"
    assert main(["plan", "-f", str(facility_file), "--topology", str(topology_file), "-o", "svg"]) == 0
    svg = capsysbinary.readouterr().out.decode()
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    switches = [s["name"] for s in yaml.safe_load(topology_file.read_text())["switches"]]
    assert all(any(t.strip() == name for t in texts) for name in switches), texts
    ids = re.findall(r'id="(bottleneck-[^"]+)"', svg)
    assert all(m in ids for m in marked) and (ids != []) == bool(marked), ids
    assert any("bottleneck: cache serving" in t for t in texts) == (case == "chicago")
    assert any("bottleneck: demand" in t for t in texts) == (case == "nebraska")


def test_under_routing_local_the_switches_read_through_the_ring_are_named(capsys):
    from switchyard.cli import main

    args = ["plan", "-f", str(REPO / "bench/topologies/chicago-facility.yaml"),
            "--topology", str(REPO / "bench/topologies/chicago.yaml")]
    assert main([*args, "--routing", "local"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[5] for line in out.splitlines()[1:7]}
    ringed = sorted(name for name, routing in rows.items() if routing == "hashed")
    assert ringed and f"routing local: {', '.join(ringed)} hold no cache of the pool" in out
    assert main([*args, "--routing", "auto"]) == 0
    assert "routing local:" not in capsys.readouterr().out


def test_a_gap_under_a_fixed_routing_mode_is_split_between_the_mode_and_the_search(tmp_path, capsys):
    """The example facility with 200 workers, routing hashed over 2 Gbps rack uplinks: most of the gap is what
    the mode costs, as routing auto on the same nodes shows; the line says both parts."""
    doc = yaml.safe_load((REPO / "examples/facility.yaml").read_text())
    doc["spec"].update(routing="hashed")
    doc["spec"]["fleets"][0]["replicas"] = 200
    doc["spec"]["network"]["switches"][:2] = [{"name": "rack-a", "uplinkGbps": 2}, {"name": "rack-b", "uplinkGbps": 2}]
    mini = yaml.safe_load((REPO / "e2e/topologies/mini.yaml").read_text())
    code, out, _ = run(tmp_path, capsys, doc, mini, "-o", "json")
    hashed = json.loads(out)
    assert code == 0 and hashed["gapPercent"] > 1.0
    doc["spec"]["routing"] = "auto"
    code, out, _ = run(tmp_path, capsys, doc, mini, "-o", "json")
    auto = json.loads(out)
    assert not any(n.startswith("the gap of") for n in auto["notes"])
    (line,) = [n for n in hashed["notes"] if n.startswith("the gap of")]
    assert f"routing auto the same nodes plan {auto['predictedGbps']:.1f} Gbps" in line
    assert f"routing hashed costs about {auto['predictedGbps'] - hashed['predictedGbps']:.1f} Gbps" in line
