"""`switchyard plan` on files, as an admin runs it before touching a cluster."""

from __future__ import annotations

import argparse
import json

import pytest
import yaml

from switchyard import plancli

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
    assert f"{doc['fairShareGbps']:g} Gbps" in line and "link Gbps" in out
    assert all("fair share" in x for x in out.splitlines() if x.startswith("baseline"))


def test_a_full_uplink_behind_a_full_cache_host_gets_a_caution(tmp_path, capsys):
    """rack-b's 14 readers fill its 4 Gbps uplink from rack-a's one cache host, which its local readers fill
    too: TCP leaves such an uplink below the fair share (bench/results/fabric-notes.md), so the plan says so."""
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
    assert len(caution) == 1 and "uplink rack-b in is full" in caution[0] and "(rack-a-cache)" in caution[0]
    code, out, _ = run(tmp_path, capsys, doc, topology, "-o", "json")
    assert json.loads(out)["fairShare"]["fullHostsBehind"] == {"up_in:rack-b": ["rack-a-cache"]}
    # the usual facility: nothing full behind a full host, no caution
    code, out, _ = run(tmp_path, capsys, facility())
    assert "caution:" not in out


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
