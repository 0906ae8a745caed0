"""Every dashboard query, evaluated by a real Prometheus scraping real sources.

Prometheus (Debian's) scrapes two targets on loopback:
- the operator (`switchyard run`) reconciling a facility on a local cluster
  (real kube-apiserver, kwok nodes from e2e/topologies/mini.yaml), so the plan
  gauges, reconcile counters and latencies exist;
- the cache exporter beside a real xrootd cache in front of a real origin,
  labelled as one of the facility's planned cache hosts, fed by real reads,
  and listening where that host's pod is (its kwok node's loopback address,
  the sidecar's port), so the operator reads it too (prediction drift); the
  switch's other planned host gets a real cache and exporter of its own.

Then every panel query of every dashboard, with its template variables set as
Grafana would set them, goes through Prometheus' HTTP API: it must parse and
evaluate, every metric it names must exist, and the throughput panels must
return data. Every switchyard_* series Prometheus holds must be declared in
switchyard.observe.metrics.catalog() (the source of docs/metrics.md).

The same Prometheus loads the chart's alert rules (charts/switchyard/rules/alerts.yaml):
every rule must evaluate without error, and the ones this healthy set-up can
judge must agree with it. `promtool check metrics` reads both endpoints' real
/metrics: a finding fails unless promtool_metrics_allow.txt lists it with its reason.

The cluster is SWITCHYARD_E2E_CLUSTER (default switchyard-metrics), reused when
running and removed afterwards unless SWITCHYARD_KEEP_CLUSTER is set.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import uuid

import pytest
from kwokcluster import local_cluster, running_operator, still_running
from prom import run_prometheus
from xrootd_fixtures import (Account, cache_pool, free_port, require, start_cache, start_exporter, start_origin,
                             wait_until, workspace, xrdcp)

from switchyard.generate import alerts, dashboards
from switchyard.apply import Kube
from switchyard.observe.exporterspec import DEFAULT_METRICS_PORT, exporter_args
from switchyard.observe.metrics import catalog, series_names

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "e2e"))
CLUSTER = os.environ.get("SWITCHYARD_E2E_CLUSTER", "switchyard-metrics")
RATE_WINDOW = "5m"   # longer than the test: every increase since Prometheus started counts
MIB = 1 << 20


@pytest.fixture(scope="module")
def cluster():
    yield from local_cluster(CLUSTER)


@pytest.fixture(scope="module")
def facility(cluster):
    """A facility applied in a fresh namespace, reconciled by a running operator."""
    from facilities import facility as facility_object

    kube = Kube.from_environment(str(cluster))
    namespace = f"dash-{uuid.uuid4().hex[:6]}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    metrics_port = free_port()
    import localcluster

    log_path = localcluster.CACHE / "e2e-logs" / CLUSTER / "operator-dashboards.log"
    # Drift readings every second over a 6 s window: observed Gbps within the test's time.
    env = {"SWITCHYARD_TIMER_SECONDS": "2", "SWITCHYARD_DRIFT_READ_SECONDS": "1", "SWITCHYARD_DRIFT_WINDOW_SECONDS": "6"}
    obj = facility_object("af", workers=6)
    obj["metadata"]["namespace"] = namespace
    try:
        with running_operator(cluster, namespace, metrics_port, log_path, env) as operator:
            kube.apply(obj)

            def pool_planned():
                still_running(operator, log_path)
                pool = kube.get("XCachePool", namespace, "af-xcache")
                plan = ((pool or {}).get("status") or {}).get("plan")
                return plan if plan and any(plan.get("hosts", {}).values()) else None

            wait_until(lambda: pool_planned() is not None, timeout=120, interval=1,
                       what="the cache pool to be planned")
            hosts = pool_planned()["hosts"]
            switch = sorted(s for s, h in hosts.items() if h)[0]

            def pod_addresses():
                """node -> pod address of the switch's planned cache hosts, once every pod has one."""
                pods = {p["spec"].get("nodeName"): p["status"].get("podIP")
                        for p in kube.list("Pod", namespace, {"switchyard.dev/pool": "af-xcache"})}
                return {h: pods[h] for h in hosts[switch]} if all(pods.get(h) for h in hosts[switch]) else None

            wait_until(lambda: pod_addresses() is not None, timeout=120, interval=1, what="the cache pods' addresses")
            yield {"namespace": namespace, "facility": "af", "pool": "af-xcache", "switch": switch,
                   "host": sorted(hosts[switch])[0], "addresses": pod_addresses(), "metrics_port": metrics_port,
                   "operator": operator, "log": log_path}
    finally:
        kube.delete("Namespace", None, namespace)


@pytest.fixture(scope="module")
def prometheus(facility):
    """Prometheus scraping the operator and a real cache's exporter, after real reads."""
    require("xrootd", "xrdcp", "prometheus")
    account = Account.for_daemons()
    base = workspace(account)
    origin = start_origin(base, account)
    exporters, caches = [], []
    try:
        # One real cache per planned host of the switch, its exporter where its pod is; reads go to the first.
        for host, address in sorted(facility["addresses"].items(), key=lambda item: item[0] != facility["host"]):
            data_dir = account.make_dir(base / f"data-{host}")
            meta = account.make_dir(base / f"meta-{host}")
            pool = cache_pool(origin.daemon.port, [str(data_dir)], str(meta),
                              pfc={"lowWatermark": 0.8, "highWatermark": 0.9})
            udp_port = free_port(socket.SOCK_DGRAM)
            args = exporter_args(pool, pool_name=facility["pool"], switch=facility["switch"], exporter_port=udp_port)
            exporters.append(start_exporter([*args, "--host", host], base, address=address, port=DEFAULT_METRICS_PORT))
            caches.append(start_cache(base, account, pool, exporter_port=udp_port))
        cache = caches[0]
        targets = [f"127.0.0.1:{facility['metrics_port']}", *(f"{e.address}:{e.metrics_port}" for e in exporters)]
        with run_prometheus(targets, base, rule_files=[REPO / alerts.RULES_FILE]) as prom:
            prom.wait_for(prom.targets_up, timeout=60, what="both targets up")
            # Wait for a first scrape of the exporter's counters, so the reads below are an increase.
            prom.wait_for(lambda: prom.query("switchyard_xcache_client_bytes_total"), timeout=60,
                          what="the exporter's first summary in Prometheus")
            data = os.urandom(4 * MIB + 3)
            lfn = origin.put("dash.bin", data)
            for attempt in ("cold", "warm"):
                result = xrdcp(cache.url_for(lfn), base / f"{attempt}.bin")
                assert result.returncode == 0, result.stderr
            selector = f'pool="{facility["pool"]}"'
            prom.wait_for(lambda: (prom.value(f"sum(switchyard_xcache_client_bytes_total{{{selector}}})") or 0) >= 2 * len(data)
                          and (prom.value(f"sum(switchyard_xcache_hit_bytes_total{{{selector}}})"
                                          f" + sum(switchyard_xcache_miss_bytes_total{{{selector}}})") or 0) >= 2 * len(data),
                          timeout=60, what="both reads (summary and close records' bytes) in Prometheus")
            prom.wait_for(lambda: prom.query("switchyard_plan_predicted_gbps") and prom.query("switchyard_fleet_ready_workers > 0"),
                          timeout=120, what="plan gauges and ready workers in Prometheus")
            # Rates need a reconcile between two scrapes (the timer runs every 2 s).
            prom.wait_for(lambda: (prom.value(f"sum(increase(switchyard_reconcile_duration_seconds_count[{RATE_WINDOW}]))") or 0) > 0,
                          timeout=60, what="a reconcile while Prometheus scrapes")
            # The operator read the switch's exporters: observed against predicted for it.
            prom.wait_for(lambda: prom.query(f'switchyard_prediction_ratio{{switch="{facility["switch"]}"}}'),
                          timeout=60, what="the operator's prediction ratio for the read switch")
            yield prom
    finally:
        for cache in caches:
            cache.daemon.stop()
        for exporter in exporters:
            exporter.stop()
        origin.daemon.stop()
        origin.meter.close()
        shutil.rmtree(base, ignore_errors=True)


def _boards() -> dict[str, dict]:
    return {spec.file: json.loads((REPO / "dashboards" / spec.file).read_text()) for spec in dashboards.DASHBOARDS}


def _series(prom, selector: str) -> list[dict]:
    body = prom._get("/api/v1/series", **{"match[]": selector})  # noqa: SLF001 - the helper's GET
    assert body["status"] == "success", body
    return body["data"]


def _choices(prom, board: dict, facility: dict) -> dict[str, str | list[str]]:
    """Every template variable resolved as Grafana resolves it, in order; each must offer values."""
    values: dict[str, str | list[str]] = {}
    for name, query in dashboards.variable_queries(board):
        selector, label = dashboards.selector_of(query)
        options = sorted({s[label] for s in _series(prom, dashboards.expand(selector, values)) if label in s})
        assert options, f"variable {name} ({query}) offers nothing"
        variable = next(v for v in board["templating"]["list"] if v["name"] == name)
        wanted = facility.get(name) if name in facility else None
        if wanted is not None:
            assert wanted in options, f"variable {name} offers {options}, not {wanted}"
        if variable.get("includeAll"):  # "All", as the dashboard opens
            values[name] = variable.get("allValue") or options
        else:
            values[name] = wanted if wanted is not None else options[0]
    return values


@pytest.mark.parametrize("file", [spec.file for spec in dashboards.DASHBOARDS])
def test_every_panel_query_evaluates_and_throughput_panels_have_data(prometheus, facility, file):
    board = _boards()[file]
    values = _choices(prometheus, board, facility)
    spec = next(s for s in dashboards.DASHBOARDS if s.file == file)
    throughput = {p.title for p in spec.panels() if p.throughput}
    assert throughput, "a dashboard without a panel that must show data checks nothing"
    empty = []
    for title, expr in dashboards.panel_queries(board):
        query = dashboards.expand(expr, values, rate_interval=RATE_WINDOW)
        result = prometheus.query(query)  # raises on a parse or evaluation error
        finite = [float(r["value"][1]) for r in result if math.isfinite(float(r["value"][1]))]
        if title in throughput and not finite:
            empty.append(f"{title}: {query}")
    assert not empty, "throughput panels without data:\n" + "\n".join(empty)


def test_served_throughput_is_what_the_cache_sent(prometheus, facility):
    """The aggregate panel's query measures the bytes the real reads moved."""
    board = _boards()["facility-throughput.json"]
    values = _choices(prometheus, board, facility)
    expr = next(e for t, e in dashboards.panel_queries(board) if t == "Served now")
    bps = prometheus.value(dashboards.expand(expr, values, rate_interval=RATE_WINDOW))
    sent = prometheus.value(f'sum(switchyard_xcache_client_bytes_total{{pool="{facility["pool"]}"}})')
    assert bps is not None and sent is not None and bps > 0
    # Every byte was sent inside the rate window (Prometheus started just before the
    # reads), so bits per second times the window is the bytes sent, times 8: a
    # panel off by a unit (bytes for bits, Gbps for bps) is off by 8x or more.
    window_seconds = 300
    assert 0.5 * sent <= bps * window_seconds / 8 <= 2 * sent


def test_every_dashboard_metric_exists_in_prometheus(prometheus):
    names = set(prometheus._get("/api/v1/label/__name__/values")["data"])  # noqa: SLF001
    wanted = {name for board in _boards().values() for _, expr in dashboards.panel_queries(board)
              for name in dashboards.metric_names(expr)}
    assert wanted and not wanted - names, f"no series for {sorted(wanted - names)}"


def test_every_exported_series_is_declared(prometheus):
    names = set(prometheus._get("/api/v1/label/__name__/values")["data"])  # noqa: SLF001
    # prometheus_client adds a *_created sample to counters and histograms.
    exported = {n for n in names if n.startswith("switchyard_") and not n.endswith("_created")}
    assert exported, "nothing from switchyard was scraped"
    undeclared = exported - series_names()
    assert not undeclared, f"exported but missing from switchyard.observe.metrics.catalog() (and docs/metrics.md): {sorted(undeclared)}"
    # And the plan metrics the reference documents are really served by the operator.
    plan = {m.name for m in catalog() if m.name.startswith("switchyard_plan_")}
    assert plan <= names, sorted(plan - names)


# ------------------------------------------------------------------ alert rules
ALLOW = pathlib.Path(__file__).with_name("promtool_metrics_allow.txt")
# Metrics an alert uses that this set-up does not produce, and why.
NOT_HERE = {"switchyard_s3_bucket_bytes": "no S3Staging here", "switchyard_s3_bucket_quota_bytes": "no S3Staging here",
            "switchyard_s3_errors_total": "no S3Staging here"}


@pytest.mark.parametrize("name", [a.name for a in alerts.alerts()])
def test_every_alert_expression_evaluates(prometheus, name):
    alert = next(a for a in alerts.alerts() if a.name == name)
    prometheus.query(alert.expr)   # raises on a parse or evaluation error
    # And Prometheus' rule manager evaluated the shipped rule without error.
    prometheus.wait_for(lambda: any(r["name"] == name and r.get("lastEvaluation", "").startswith("2")
                                    for r in prometheus.rules()), timeout=30, what=f"{name} evaluated")
    (rule,) = [r for r in prometheus.rules() if r["name"] == name]
    assert rule["health"] == "ok", rule.get("lastError")


def test_every_alert_metric_exists_in_prometheus(prometheus):
    names = set(prometheus._get("/api/v1/label/__name__/values")["data"])  # noqa: SLF001
    wanted = {n for a in alerts.alerts() for n in dashboards.metric_names(a.expr)} - set(NOT_HERE)
    assert wanted and not wanted - names, f"no series for {sorted(wanted - names)}"


def test_the_alerts_agree_with_this_healthy_set_up(prometheus, facility):
    """What the running operator and exporters make true or false: the joins and labels are right."""
    by_name = {a.name: a for a in alerts.alerts()}
    # The operator is up under job "switchyard".
    assert prometheus.query(by_name["SwitchyardOperatorDown"].expr) == []
    # Every xrootd reports: no exporter is silent.
    assert prometheus.query(by_name["SwitchyardCacheSilent"].expr) == []
    # The read switch has an exporter per planned host: not missing; the plan's other switches have none here.
    planned = {r["metric"]["switch"] for r in prometheus.query(
        f'switchyard_plan_pool_caches{{namespace="{facility["namespace"]}", pool="{facility["pool"]}"}} > 0')}
    assert facility["switch"] in planned
    missing = prometheus.query(by_name["SwitchyardCacheHostsMissing"].expr)
    assert {r["metric"]["switch"] for r in missing} == planned - {facility["switch"]}
    for r in missing:
        assert {k: r["metric"][k] for k in ("namespace", "facility", "pool")} == {
            "namespace": facility["namespace"], "facility": facility["facility"], "pool": facility["pool"]}
    # Were one of the read switch's exporters gone, it would be missing: the count joins on pool and switch.
    host = facility["host"]
    without = by_name["SwitchyardCacheHostsMissing"].expr.replace(
        '{mark="high"}', f'{{mark="high", host!="{host}"}}')
    assert facility["switch"] in {r["metric"]["switch"] for r in prometheus.query(without)}


def _allowed() -> set[str]:
    """Findings listed in promtool_metrics_allow.txt (the text before ' # reason')."""
    out = set()
    for line in ALLOW.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            finding, _, reason = line.partition(" # ")
            assert reason.strip(), f"{line!r}: an allowed finding needs its reason"
            out.add(finding.strip())
    return out


def test_promtool_check_metrics_on_both_endpoints(prometheus, facility):
    require("promtool")
    import urllib.request

    urls = sorted({t["scrapeUrl"] for t in prometheus._get("/api/v1/targets")["data"]["activeTargets"]})  # noqa: SLF001
    assert f"http://127.0.0.1:{facility['metrics_port']}/metrics" in urls and len(urls) >= 2, urls
    allowed, found, seen = _allowed(), {}, set()
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read()
        assert b"switchyard_" in text, url
        result = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60)
        findings = [line.strip() for line in (result.stdout + result.stderr).decode().splitlines() if line.strip()]
        if result.returncode != 0 and not findings:
            findings = [f"promtool exited {result.returncode}"]
        found[url] = [f for f in findings if f not in allowed]
        seen.update(findings)
    assert not any(found.values()), f"promtool check metrics findings (fix, or allow with a reason in {ALLOW.name}): {found}"
    assert allowed <= seen, f"{ALLOW.name} allows findings promtool no longer reports: {sorted(allowed - seen)}"
