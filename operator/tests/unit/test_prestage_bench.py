"""The prestage fabric bench's pure parts (bench/prestage_bench.py, issue 30's prestage acceptance): the runner
started with the Job's own argv and environment, every analysis read a miss (each stream its own files, more
than its pace reads), the dataset outlasting the windows, and the summary's ratios against the fair share of
what the WAN share leaves."""

from __future__ import annotations

import os
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "bench"))

import prestage_bench as bench  # noqa: E402
from fabric_bench import CPU_LIMIT, load_case, placements  # noqa: E402
from fabric_scenario import layout  # noqa: E402
from switchyard.planner.flow import ring_weights  # noqa: E402
from switchyard.planner.hashing import home  # noqa: E402
from switchyard.prestage.runner import parse_args  # noqa: E402
from switchyard.routing import RING_FILE_ENV, Router  # noqa: E402

SCALE = 2.0
MIB = 1 << 20


def case_layout():
    topology, pools, fleets, routing = load_case(bench.CASE)
    chosen = placements(topology, pools, fleets, routing)["a: switchyard"]
    the = layout(topology, pools, fleets, chosen.placement, dict(chosen.hash_weights), SCALE, [])
    (_pool, ring), = ring_weights(topology, pools, chosen.placement, dict(chosen.hash_weights)).items()
    return topology, the, ring


def test_the_case_puts_every_reader_on_the_ring_and_asks_more_than_the_share_leaves():
    topology, the, ring = case_layout()
    assert sorted(ring) == ["rack-1-nvme-0", "rack-1-nvme-1"] and sorted(the.caches) == sorted(ring)
    assert all(s.ring for s in the.streams) and len(the.streams) == 16
    demand = sum(s.demand_gbps for s in the.streams)
    assert demand == 32 and topology.wan_gbps == 40
    assert bench.fair_share(topology.wan_gbps, 0.5, demand) == 20    # the WAN's rest, not the demand, binds


def test_each_analysis_stream_reads_files_of_its_own_through_their_ring_homes_and_cannot_run_out():
    _topology, the, ring = case_layout()
    seconds = bench.measured_seconds(10, 3, 20)
    out = bench.analysis_layout(the, ring, seconds, 8 * MIB)
    files = [f for s in out.streams for _, f in s.urls]
    assert len(files) == len(set(files))                             # no file read twice: every read a miss
    assert all(cache == home(f, ring) for s in out.streams for cache, f in s.urls)
    assert out.warm == {c: set() for c in the.caches}                # nothing warmed first
    for s in out.streams:
        # its pace (and the reader's one second of credit) reads less than its list in the measured time
        assert len(s.urls) * 8 * MIB > s.wire_mbit * 1e6 / 8 * (seconds + 1)
    assert [s.wire_mbit for s in out.streams] == [s.wire_mbit for s in the.streams]


def test_the_dataset_outlasts_the_windows_at_the_budget_and_the_prefetch_lead():
    _topology, pools, _fleets, _routing = load_case(bench.CASE)
    lead = bench.prefetch_bytes(pools[0])
    assert lead == 10 * MIB                                          # pfc.prefetch 10 blocks of 1 MiB
    seconds = bench.measured_seconds(10, 3, 20)
    for file_mib in (8, 64):
        files = bench.dataset(40, seconds, file_mib * MIB, 4, lead)
        assert files[0] == "/p0000.root" and len(set(files)) == len(files)
        # what the pace reads over the windows, and the caches' lead on the 4 files read at once, leave files
        assert len(files) * file_mib * MIB > 40e6 / 8 * seconds + 4 * min(lead, file_mib * MIB)


def test_the_runner_gets_the_jobs_argv_and_environment_with_the_runs_paths():
    job = bench.runner_job(0.5, 0.08, "xcache", 1094, 4)
    argv = bench.runner_argv(job, "/venv/bin/switchyard", "/w/urls", "/w/ring", "/w/journal", "/w/term")
    container = job["spec"]["template"]["spec"]["containers"][0]
    start = argv.index("/venv/bin/switchyard")
    env = dict(a.split("=", 1) for a in argv[1:start])
    assert argv[0] == "env" and env == {**{e["name"]: e["value"] for e in container["env"]}, RING_FILE_ENV: "/w/ring"}
    command = argv[start:]
    assert command[1:len(container["command"])] == [a if a != "/etc/switchyard/prestage/urls" else "/w/urls"
                                                    for a in container["command"][1:]]
    args = parse_args(command[2:])
    assert args.gbps == pytest.approx(0.04) and args.parallel == 4          # wanShare x W, the spec's parallel
    assert args.urls == ["/w/urls"] and args.journal == "/w/journal" and args.termination_log == "/w/term"
    # the ring file as the fleets' routing ConfigMap writes it routes as the analysis' homes do
    ring = {"rack-1-nvme-0": 0.5, "rack-1-nvme-1": 0.5}
    text = bench.ring_text(ring, {"rack-1-nvme-0": "10.77.1.1", "rack-1-nvme-1": "10.77.1.2"})
    router = Router.from_env({**env, RING_FILE_ENV: "", "SWITCHYARD_CACHE_RING": ",".join(text.split())})
    by_address = {"10.77.1.1": "rack-1-nvme-0", "10.77.1.2": "rack-1-nvme-1"}
    for f in ("/p0000.root", "/p0001.root", "/p0002.root", "/p0003.root"):
        routed = router.route(f"root://10.77.250.1:1094/{f}")
        assert routed.endswith(f"/{f}") and by_address[routed.split("//")[1].split(":")[0]] == home(f, ring)


def test_the_series_gives_the_prestage_and_the_runner_second_by_second_against_the_budget():
    model = {"wan_gbps": 40, "share": 0.5, "demand_gbps": 32, "scale": 2.0}
    mbyte = 1_000_000
    # second 1: WAN 10 MB, readers 5 MB: prestage 5 MB/s = 40 Mbit/s = 20 model Gbps, the budget; the runner read
    # 4.5 MB of payload (4.7 on the wire); second 2: a burst of 10 MB for the prestage, the runner unread (-1)
    # the caches held 5 MB more of the dataset (the budget, as frames carry it) and 2.5 MB more of the analysis'
    # files (half its fair share) after second 1; in second 2 they wrote 10 MB of the analysis' files
    series = [(0.0, 0, 0, 0, 0, 0), (1.0, 10 * mbyte, 5 * mbyte, 4_500_000, 5 * mbyte, 2_500_000),
              (2.0, 25 * mbyte, 10 * mbyte, -1, 5 * mbyte, 12_500_000)]
    rates = bench.series_rates(series, model)
    assert rates[0]["prestage_over_budget"] == pytest.approx(1.0)
    assert rates[0]["runner_over_budget"] == pytest.approx(0.9 * 1514 / 1448, abs=1e-3)
    assert rates[0]["dataset_cached_over_budget"] == pytest.approx(1514 / 1448, abs=1e-3)
    assert rates[0]["analysis_cached_over_fair"] == pytest.approx(0.5 * 1514 / 1448, abs=1e-3)
    assert rates[1]["prestage_over_budget"] == pytest.approx(2.0) and rates[1]["runner_over_budget"] is None
    assert rates[1]["dataset_cached_over_budget"] == 0 and rates[1]["analysis_cached_over_fair"] == pytest.approx(
        2 * 1514 / 1448, abs=1e-3)
    assert bench.series_totals(series) == {"seconds": 2.0, "wan": 25 * mbyte, "readers_in": 10 * mbyte,
                                           "runner_read": None, "dataset_cached": 5 * mbyte,
                                           "analysis_cached": 12_500_000}
    assert bench.series_totals(series[:2])["runner_read"] == 4_500_000 and bench.series_totals(series[:1]) == {}
    assert bench.spread([1.0]) == {}
    assert bench.spread([float(v) for v in range(11)]) == {"p10": 1.0, "p50": 5.0, "p90": 9.0, "max": 10.0}
    assert bench.spread([1.0, 2.0]) == {"p10": 1.1, "p50": 1.5, "p90": 1.9, "max": 2.0}


def test_what_the_caches_hold_of_each_set_is_the_blocks_their_namespaces_files_have(tmp_path):
    # a namespace of symlinks into a data space, as oss.localroot with oss.space data lays a cache out
    data, namespaces = tmp_path / "data", [tmp_path / "ns0", tmp_path / "ns1"]
    for d in (data, *namespaces):
        d.mkdir()
    for name, ns, written in (("p0000.root", 0, 2 * MIB), ("a00-0000.root", 1, 1 * MIB), ("p0001.root", 1, 0)):
        target = data / f"{ns}-{name}"
        with open(target, "wb") as out:
            out.truncate(64 * MIB)                 # sparse: only what was written is allocated
            out.write(os.urandom(written))
        (namespaces[ns] / name).symlink_to(target)
    (namespaces[0] / "p0000.root.cinfo").write_bytes(b"x" * 4096)   # not a data file of either set
    held = bench.cached_bytes([str(n) for n in namespaces] + [str(tmp_path / "missing")])
    assert held["p"] == pytest.approx(2 * MIB, rel=0.01) and held["a"] == pytest.approx(MIB, rel=0.01)


def run_of(windows, **extra):
    return {"model": {"wan_gbps": 40, "share": 0.5, "demand_gbps": 32, "scale": 2.0}, "windows": windows,
            "dataset_files": 10, "runner_report": {"files_done": 10, "files_failed": 0},
            "pass_origin_bytes": 300, "pass_ok": True, **extra}


def test_the_summary_divides_the_analysis_by_the_rest_of_the_wan_and_the_prestage_by_its_budget():
    # WAN 78 Mbit/s of 80; the readers' links in 37 Mbit/s: analysis 18.5 Gbps of its 20, prestage 20.5 of 20
    window = {"wan_mbit": 78.0, "analysis_mbit": 37.0, "cpu_busy": 0.4}
    busy = {"wan_mbit": 78.0, "analysis_mbit": 20.0, "cpu_busy": CPU_LIMIT + 0.01}
    s = bench.summarise(run_of([window, busy]))
    first = s["windows"][0]
    assert first["wan_gbps"] == 39 and first["wan_used"] == pytest.approx(0.975)
    assert first["analysis_gbps"] == 18.5 and first["prestage_gbps"] == 20.5 and first["fair_gbps"] == 20
    assert first["analysis_over_fair"] == pytest.approx(0.925) and first["prestage_over_budget"] == pytest.approx(1.025)
    assert not s["windows"][1]["valid"] and s["valid_windows"] == 1
    assert s["analysis_over_fair"] == pytest.approx(0.925) and s["met"]     # the busy window left out
    assert s["prestaged"] and s["pass_zero"]


def test_a_valid_window_under_the_bound_fails_the_run_and_demand_below_the_rest_is_the_fair_share():
    low = {"wan_mbit": 78.0, "analysis_mbit": 34.0, "cpu_busy": 0.3}      # 17 of 20: 0.85
    ok = {"wan_mbit": 78.0, "analysis_mbit": 38.0, "cpu_busy": 0.3}
    s = bench.summarise(run_of([ok, low]))
    assert not s["met"] and s["analysis_over_fair_min"] == pytest.approx(0.85)
    assert bench.fair_share(40, 0.5, 12) == 12
    assert bench.summarise(run_of([low], model={"wan_gbps": 40, "share": 0.5, "demand_gbps": 17,
                                               "scale": 2.0}))["met"]
    # every window CPU-bound: no verdict of met, the figures still shown over all of them
    s = bench.summarise(run_of([{**ok, "cpu_busy": 0.9}]))
    assert not s["met"] and s["valid_windows"] == 0 and s["analysis_over_fair"] == pytest.approx(0.95)
    # the pass read file data from the origin, or the prestage did not finish
    assert not bench.summarise(run_of([ok], pass_origin_bytes=1 << 20))["pass_zero"]
    assert not bench.summarise(run_of([ok], runner_report={"files_done": 9, "files_failed": 1}))["prestaged"]


def test_the_report_gives_each_window_the_verdicts_and_what_the_series_shows():
    mbyte = 1_000_000
    series = [(0.0, 0, 0, 0, 0, 0), (1.0, 10 * mbyte, 5 * mbyte, 4_500_000, 5 * mbyte, 2_500_000),
              (2.0, 20 * mbyte, 10 * mbyte, 9_000_000, 10 * mbyte, 5_000_000)]
    run = run_of([{"wan_mbit": 78.0, "analysis_mbit": 37.0, "cpu_busy": 0.4}], series=series, caches=["c0", "c1"],
                 workers=["w0"], ring={"c0": 0.5, "c1": 0.5}, readers=16, file_bytes=64 * MIB,
                 runner_command=["switchyard", "prestage", "--gbps", "0.04"], runner_exit=0, runner_seconds=100.0,
                 runner_mean_over_budget=0.9)
    run["summary"] = bench.summarise(run)
    args = bench.argparse.Namespace(share=0.5, case=bench.CASE, scale=SCALE, parallel=4, file_mib=64, repeats=1,
                                    windows=1, window=20.0, warmup=10.0)
    text = bench.report([run], args, {"seconds": 100, "load_start": 1.0, "load_end": 1.0, "congestion": "bbr"})
    # a window without its span (a run from before df00291's bench): the readers' links in stand for the analysis
    assert ("| 0 | 1 | 39.00 (0.975) | 20.50 (WAN − received) | 1.025 | 18.50 (received) | 18.50 | 20.00 | 0.925 "
            "| 40% | yes |") in text
    assert "10/10 files done" in text and "0 origin bytes (0 file bytes)" in text
    assert "the caches came to hold 10 MB of the dataset and 5 MB of the analysis' files" in text
    assert text.rstrip().endswith("acceptance ≥ 0.9 in every valid window: met.")


def test_the_wan_split_is_what_the_caches_fetched_of_each_set_over_the_window():
    # XCache fetches an opened file to its end ahead of its reader: the readers received 10 Mbit/s (5 model Gbps)
    # while the caches fetched 15 MB of the analysis' files and 5 MB of the dataset in the window's 2 s (samples at
    # 1 s and 3 s; the ones outside its span left out)
    mbyte = 1_000_000
    series = [(0.0, 0, 0, 0, 0, 0), (1.0, 0, 0, 0, 1 * mbyte, 1 * mbyte), (2.0, 0, 0, 0, 4 * mbyte, 9 * mbyte),
              (3.0, 0, 0, 0, 6 * mbyte, 16 * mbyte), (4.0, 0, 0, 0, 50 * mbyte, 50 * mbyte)]
    window = {"wan_mbit": 80.0, "analysis_mbit": 10.0, "cpu_busy": 0.2, "span": [0.5, 3.5]}
    figures = bench.window_figures(window, run_of([])["model"], series)
    wire = 1514 / 1448
    assert figures["by_fetches"] and figures["received_gbps"] == 5
    assert figures["analysis_gbps"] == pytest.approx(15 * 8 / 2 / 2 * wire, abs=1e-3)     # 31.4 of a fair 20
    assert figures["prestage_gbps"] == pytest.approx(5 * 8 / 2 / 2 * wire, abs=1e-3)
    assert figures["analysis_over_fair"] == pytest.approx(30 * wire / 20, abs=1e-3)
    assert figures["prestage_over_budget"] == pytest.approx(10 * wire / 20, abs=1e-3)
    s = bench.summarise(run_of([window], series=series))
    assert s["met"] and s["windows"][0] == figures
    # fewer than two samples inside the span: the links in stand for the analysis, the WAN's rest for the prestage
    alone = bench.window_figures({**window, "span": [0.5, 1.5]}, run_of([])["model"], series)
    assert not alone["by_fetches"] and alone["analysis_gbps"] == 5 and alone["prestage_gbps"] == 35
