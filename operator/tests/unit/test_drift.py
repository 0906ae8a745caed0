"""Prediction drift (switchyard.observe.drift): observed Gbps from exporter counters, and the sustained verdict."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from switchyard import conditions as cond
from switchyard.observe.drift import (
    REASON, SERVE, DriftRules, HostReading, SwitchDrift, assess, drift_status, host_gbps, observations,
    observed_gbps, parse_readings, predictions, record, seed, with_drift,
)
from switchyard.observe.exporter import ExporterSettings, XCacheCollector
from switchyard.policy.settings import Settings
from switchyard.xrootd.monitoring import decode

SUMMARY = (Path(__file__).parent / "golden" / "xrootd-5.5.3-summary.xml").read_bytes()
RULES = DriftRules()
GB = 1e9 / 8  # bytes per Gbps-second


FSTREAM = (Path(__file__).parent / "golden" / "xrootd-5.5.3-fstream.bin").read_bytes()  # two closes, 3145733 each


def collector_text(collector: XCacheCollector) -> str:
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def fed(*packets: tuple[bytes, float]) -> XCacheCollector:
    """A real exporter's collector, started at 100, after real xrootd packets (each with its arrival time)."""
    collector = XCacheCollector(ExporterSettings("af-xcache", "node-1", "sw1", (), (), 0.9, 0.95))
    collector.started_at = 100.0
    for packet, at in packets:
        collector.receive(packet, at)
    return collector


def test_parse_reads_the_bytes_readers_read_as_of_the_last_fstream_packet():
    # Not the summary's link-out count (xrootd leaves busy connections out of it): the f-stream's bytes read.
    [reading] = parse_readings(collector_text(fed((SUMMARY, 1000.0), (FSTREAM, 1234.5))))
    assert reading == HostReading("af-xcache", "node-1", "sw1", 2 * 3145733, 100.0, 1234.5)
    assert decode(SUMMARY).bytes_sent != reading.served_bytes


def test_the_count_is_up_to_date_at_a_summary_once_the_fstream_was_silent_two_intervals():
    """xrootd sends the f-stream at each pass that has something to say (a file read, a close), at the summaries'
    interval: an idle cache sends none, and must still be measured (0 Gbps), once no pass can be outstanding."""
    def at(*packets):
        return [r.reported_at for r in parse_readings(collector_text(fed(*packets)))]
    assert at((FSTREAM, 10.0), (SUMMARY, 11.0), (SUMMARY, 12.0)) == [10.0]      # a pass may be on its way
    assert at((FSTREAM, 10.0), (SUMMARY, 11.0), (SUMMARY, 12.0), (SUMMARY, 13.0)) == [13.0]
    assert at((FSTREAM, 10.0), *((SUMMARY, t) for t in (11.0, 12.0, 13.0)), (FSTREAM, 14.0), (SUMMARY, 15.0)) \
        == [14.0]
    # An exporter that started beside an idle cache: measured from its third summary, at 0 bytes.
    [idle] = parse_readings(collector_text(fed(*((SUMMARY, t) for t in (1.0, 2.0, 3.0)))))
    assert (idle.served_bytes, idle.reported_at) == (0.0, 3.0)


def test_parse_skips_an_exporter_not_yet_up_to_date_and_garbage():
    assert parse_readings(collector_text(fed())) == []
    assert parse_readings(collector_text(fed((SUMMARY, 1.0), (SUMMARY, 2.0)))) == []
    assert parse_readings("not { metrics") == []


def reading(host: str, switch: str, gbytes: float, at: float, started: float = 1.0, pool: str = "p") -> HostReading:
    return HostReading(pool, host, switch, gbytes * 1e9, started, at)


def history_of(*series: tuple[str, str, list[tuple[float, float]]], started: float = 1.0) -> dict:
    """Reads every 10 s; each host's (time, GB sent) points, read when reported."""
    history: dict = {}
    times = sorted({t for _, _, points in series for t, _ in points})
    for t in times:
        readings = [reading(h, sw, gb, at, started) for h, sw, points in series for at, gb in points if at == t]
        history = record(history, readings, seen=t, keep_seconds=RULES.window_seconds + RULES.stale_seconds)
    return history


def test_a_host_served_rate_is_its_counter_increase_over_its_own_report_times():
    # 10 GB per 10 s = 8 Gbps
    points = history_of(("h1", "sw1", [(t, t) for t in range(0, 70, 10)]))[("p", "h1")][1]
    assert host_gbps(points, now=60, rules=RULES) == pytest.approx(8.0)


def test_a_read_between_two_summaries_adds_no_point():
    history = record({}, [reading("h1", "sw1", 5, at=100)], seen=100, keep_seconds=120)
    history = record(history, [reading("h1", "sw1", 5, at=100)], seen=107, keep_seconds=120)  # same summary
    assert len(history[("p", "h1")][1]) == 1


def test_too_short_stale_or_restarted_counters_are_not_a_rate():
    short = history_of(("h1", "sw1", [(0, 0), (10, 10)]))[("p", "h1")][1]
    assert host_gbps(short, now=10, rules=RULES) is None          # 10 s < half the 60 s window
    steady = history_of(("h1", "sw1", [(t, t) for t in range(0, 70, 10)]))[("p", "h1")][1]
    assert host_gbps(steady, now=60 + RULES.stale_seconds + 1, rules=RULES) is None   # no summary for > 60 s
    # xrootd restarted at t=40: its counter starts again; the old run does not count against the new one.
    history = {}
    for t, gb, started in [(0, 100, 1.0), (10, 110, 1.0), (20, 120, 1.0), (30, 130, 1.0),
                           (40, 2, 40.0), (50, 12, 40.0), (60, 22, 40.0), (70, 32, 40.0)]:
        history = record(history, [reading("h1", "sw1", gb, t, started)], seen=t, keep_seconds=120)
    assert host_gbps(history[("p", "h1")][1], now=70, rules=RULES) == pytest.approx(8.0)
    assert host_gbps(history[("p", "h1")][1][:6], now=50, rules=RULES) is None  # 10 s since the restart


def test_a_rate_does_not_go_missing_when_the_window_start_falls_between_two_read_summaries():
    # As e2e/test_prediction_drift.py ran it (issue #29): xrootd reports every 1 s, the operator reads about
    # every 1.2 s, so it skips one summary in five or six; window 4 s. Points 4.01, 1.99 and 1.00 s before the
    # last: the one 4.01 s back is outside the window by 10 ms of arrival jitter, and the oldest inside it is
    # 1.99 s back, under half a window. The rate is the increase since the summary at or before the window's
    # start, 4.01 s, not "unmeasured" for one read (which restarts a streak toward Drift).
    rules = DriftRules(window_seconds=4, stale_seconds=10)
    history = {}
    for at in (96.0, 97.0, 98.0, 100.0, 102.02, 103.01, 104.01):   # 1 GB a second
        history = record(history, [reading("h1", "sw1", at - 90, at)], seen=at + 0.2, keep_seconds=14)
    assert host_gbps(history[("p", "h1")][1], now=104.3, rules=rules) == pytest.approx(8.0)


def test_a_steady_host_read_out_of_step_with_its_summaries_is_measured_at_every_read():
    """Summaries every 1 s with a few ms of jitter, reads every 1.1 to 1.3 s: once a window has passed, every
    read has a rate (within one process a subject's rate must not come and go)."""
    rules = DriftRules(window_seconds=4, stale_seconds=10)
    jitter = [((7 * i) % 23 - 11) / 1000 for i in range(400)]    # -11 .. +11 ms, deterministic
    summaries = [(i + jitter[i], 2.0 * i) for i in range(400)]     # (arrival, GB sent): 16 Gbps
    history, missing, now = {}, [], 0.5
    while now < 300:
        at, gb = max(s for s in summaries if s[0] <= now)
        history = record(history, [reading("h1", "sw1", gb, at)], seen=now, keep_seconds=14)
        gbps = host_gbps(history[("p", "h1")][1], now, rules)
        if now > rules.window_seconds + 2:
            if gbps is None:
                missing.append(round(now, 2))
            else:
                assert gbps == pytest.approx(16.0, rel=0.02)
        now += 1.1 + 0.1 * (int(now * 10) % 3)                      # 1.1, 1.2 or 1.3 s
    assert missing == []


def test_old_points_are_dropped():
    history = history_of(("h1", "sw1", [(t, t) for t in range(0, 300, 10)]))
    assert min(p.seen for p in history[("p", "h1")][1]) >= 290 - (RULES.window_seconds + RULES.stale_seconds)


def test_observed_per_switch_sums_its_hosts_and_needs_every_planned_one():
    history = history_of(("h1", "sw1", [(t, t) for t in range(0, 70, 10)]),            # 8 Gbps
                         ("h2", "sw1", [(t, t / 2) for t in range(0, 70, 10)]),        # 4 Gbps
                         ("h3", "sw2", [(t, 3 * t) for t in range(0, 70, 10)]))        # 24 Gbps
    observed = observed_gbps(history, {"sw1": [("p", "h1"), ("p", "h2")], "sw2": [("p", "h3")],
                                       "sw3": [("p", "h9")], "sw4": []}, now=60, rules=RULES)
    assert observed["sw1"] == pytest.approx(12.0)
    assert observed["sw2"] == pytest.approx(24.0)
    assert observed["sw3"] is None   # its planned host never reported
    assert observed["sw4"] is None   # no cache there: nothing observable


def subjects(mapping: dict) -> dict:
    """A switch name as key means its serve; (switch, direction) keys are kept."""
    return {(key, SERVE) if isinstance(key, str) else key: value for key, value in mapping.items()}


def run(predicted, steps, rules=RULES, memory=None):
    """Assess at each (time, observed) in turn; returns every assessment."""
    memory = subjects(memory or {})
    out = []
    for now, observed in steps:
        result = assess(subjects(predicted), subjects(observed), memory, now, rules)
        memory = result.memory
        out.append(result)
    return out


def test_drift_needs_the_disagreement_to_last_the_sustain_time():
    predicted = {"sw1": 10.0, "sw2": 10.0}
    steps = run(predicted, [(t, {"sw1": 5.0, "sw2": 10.2}) for t in range(0, 301, 15)])
    assert [s.drifting for s in steps[:-1]] == [()] * (len(steps) - 1)        # 285 s is not enough
    last = steps[-1]
    assert [v.switch for v in last.drifting] == ["sw1"] and last.began == (("sw1", SERVE),)
    assert last.drifting[0].ratio == pytest.approx(0.5)
    # An interruption restarts the clock.
    steps = run(predicted, [(t, {"sw1": 5.0 if t != 150 else 9.0, "sw2": 10.0}) for t in range(0, 301, 15)])
    assert not steps[-1].drifting
    # Too much is as wrong as too little.
    assert run(predicted, [(0, {"sw1": 13.0, "sw2": 10}), (300, {"sw1": 13.0, "sw2": 10})])[-1].began == (("sw1", SERVE),)


def test_within_the_threshold_never_drifts():
    steps = run({"sw1": 10.0}, [(t, {"sw1": 7.6}) for t in range(0, 1000, 15)])
    assert not any(s.drifting for s in steps)


def test_drift_clears_only_after_agreeing_within_the_narrower_band():
    drifting = {"sw1": SwitchDrift(True)}
    # 0.8 is inside the raising threshold but outside the clearing one: it stays.
    steps = run({"sw1": 10.0}, [(t, {"sw1": 8.0}) for t in range(0, 600, 15)], memory=drifting)
    assert all(s.drifting for s in steps) and not any(s.cleared for s in steps)
    steps = run({"sw1": 10.0}, [(t, {"sw1": 9.0}) for t in range(0, 61, 15)], memory=drifting)
    assert [bool(s.drifting) for s in steps] == [True, True, True, True, False]
    assert steps[-1].cleared == (("sw1", SERVE),)


def test_a_switch_below_the_floor_or_an_idle_facility_is_not_judged():
    quiet = run({"sw1": 0.5, "sw2": 10.0}, [(t, {"sw1": 0.8, "sw2": 10.0}) for t in range(0, 601, 15)])
    assert not any(s.drifting for s in quiet)
    assert [v.judged for v in quiet[-1].verdicts] == [False, True]
    # Serving far more than a prediction under the floor is judged against the floor.
    loud = run({"sw1": 0.5, "sw2": 10.0}, [(t, {"sw1": 5.0, "sw2": 10.0}) for t in range(0, 601, 15)])
    assert [v.subject for v in loud[-1].drifting] == [("sw1", SERVE)]
    # Nobody reads: not a disagreement with the model, and a standing drift goes.
    idle = run({"sw1": 10.0, "sw2": 10.0}, [(t, {"sw1": 0.2, "sw2": 0.5}) for t in range(0, 601, 15)],
               memory={"sw1": SwitchDrift(True)})
    assert idle[0].idle and idle[0].cleared == (("sw1", SERVE),) and not any(s.drifting for s in idle)


def test_an_unmeasured_switch_keeps_its_verdict_and_restarts_its_streak():
    steps = run({"sw1": 10.0}, [(0, {"sw1": 5.0}), (200, {"sw1": None}), (300, {"sw1": 5.0}), (500, {"sw1": 5.0}),
                                (600, {"sw1": 5.0})])
    assert [bool(s.drifting) for s in steps] == [False, False, False, False, True]
    kept = run({"sw1": 10.0}, [(0, {"sw1": None})], memory={"sw1": SwitchDrift(True)})[0]
    assert kept.drifting and not kept.cleared


def test_a_switch_leaving_the_plan_clears_its_drift():
    [result] = run({"sw2": 10.0}, [(0, {"sw2": 10.0})], memory={"sw1": SwitchDrift(True), ("sw1", "in"): SwitchDrift(True)})
    assert result.cleared == (("sw1", "in"), ("sw1", SERVE))


def drifting_assessment():
    return run({"sw1": 10.0, "sw-b.2": 10.0, "sw3": 10.0},
               [(t, {"sw1": 4.0, "sw-b.2": 20.0, "sw3": 10.0}) for t in (0, 300)])[-1]


def test_the_condition_names_the_switches_and_survives_a_restart():
    result = drifting_assessment()
    states = with_drift(cond.ready("3 children ready"), result)
    assert states["Ready"].status is True                  # running children are not disturbed
    degraded = states["Degraded"]
    assert (degraded.status, degraded.reason) == (True, REASON)
    assert "switch sw1 served 4.00 Gbps, predicted 10.00 (ratio 0.40)" in degraded.message
    assert "switch sw-b.2 served 20.00 Gbps" in degraded.message and "sw3" not in degraded.message
    conditions = cond.merge([], 1, "2026-11-23T00:00:00Z", **states)
    assert seed(conditions) == subjects({"sw1": SwitchDrift(True), "sw-b.2": SwitchDrift(True)})


def test_another_degraded_reason_keeps_its_reason_and_the_drift_is_added():
    states = cond.ready()
    states["Degraded"] = cond.State(True, "NodesNotReady", "1 node(s) ... NotReady")
    merged = with_drift(states, drifting_assessment())
    assert merged["Degraded"].reason == "NodesNotReady"
    assert merged["Degraded"].message.startswith("1 node(s)") and REASON in merged["Degraded"].message
    assert set(seed(cond.merge([], 1, "t", **merged))) == {("sw1", SERVE), ("sw-b.2", SERVE)}
    assert with_drift(states, None) == states
    assert seed(cond.merge([], 1, "t", **states)) == {}


# ---------------------------------------------------------------- across a takeover (status.drift)
OLD = 1_000.0        # the old leader's monotonic clock at its wall clock's WALL
NEW = 50.0           # the new leader's
WALL = 1_795_000_000.0
CARRY = RULES.window_seconds + RULES.stale_seconds


def takeover(assessment, at: float, conditions=None) -> tuple[dict, dict]:
    """What the old leader wrote (status.drift, through its model) and the new leader's memory seeded from it
    `at` seconds later; the two monotonic clocks have nothing in common."""
    from switchyard.api import AnalysisFacilityStatus

    written = drift_status(assessment.memory, offset=WALL - OLD)
    status = AnalysisFacilityStatus.model_validate({"drift": written}).model_dump(by_alias=True, mode="json")
    assert status["drift"] == written                      # the status model holds it as it is
    return written, seed(conditions, status["drift"], now=NEW, offset=WALL + at - NEW, rules=RULES)


def test_a_pending_streak_is_written_on_the_wall_clock_and_carried_on_by_a_new_leader():
    # Out of band since OLD; 200 s of it seen by the old leader, then a takeover 20 s later.
    before = run({"sw1": 10.0, "sw2": 10.0}, [(OLD + t, {"sw1": 5.0, "sw2": 10.0}) for t in range(0, 201, 15)])[-1]
    written, memory = takeover(before, at=220)
    assert written == {"pending": [{"switch": "sw1", "direction": SERVE, "toward": "Drift",
                                    "since": "2026-11-18T11:06:40Z"}]}
    assert memory[("sw1", SERVE)] == SwitchDrift(False, NEW - 220, NEW + CARRY) and ("sw2", SERVE) not in memory
    assert drift_status(memory, offset=WALL + 220 - NEW) == written   # written back unchanged: no status write
    # Unmeasured for the new process's first window, then out of band still: raised 300 s after the streak
    # began (80 s after the takeover), not windowSeconds + sustainSeconds after the takeover.
    after = run({"sw1": 10.0}, [(NEW + t, {"sw1": None if t < 60 else 5.0}) for t in range(0, 91, 15)],
                memory=memory)
    assert [bool(a.drifting) for a in after] == [False] * 6 + [True]
    assert after[-1].began == (("sw1", SERVE),) and after[4].memory[("sw1", SERVE)].since == NEW - 220


def test_a_carried_streak_ends_when_the_subject_is_measured_back_in_band_or_stays_unmeasured():
    before = run({"sw1": 10.0}, [(OLD + t, {"sw1": 5.0}) for t in range(0, 201, 15)])[-1]
    _, memory = takeover(before, at=220)
    back = run({"sw1": 10.0}, [(NEW, {"sw1": None}), (NEW + 60, {"sw1": 9.5}), (NEW + 75, {"sw1": 5.0}),
                               (NEW + 375, {"sw1": 5.0})], memory=memory)
    assert back[0].memory[("sw1", SERVE)].since == NEW - 220     # not measured yet: kept
    assert back[1].memory[("sw1", SERVE)] == SwitchDrift()        # measured in band: gone
    assert back[2].memory[("sw1", SERVE)].since == NEW + 75      # a new streak of this process's own
    assert not back[2].drifting and back[3].drifting
    # Within windowSeconds + staleSeconds, measured out of band then unmeasured again keeps the streak; past that, unmeasured is for reasons of its own, as in one process.
    flicker = run({"sw1": 10.0}, [(NEW + 30, {"sw1": 5.0}), (NEW + CARRY - 1, {"sw1": None}),
                                  (NEW + CARRY, {"sw1": None})], memory=memory)
    assert [a.memory[("sw1", SERVE)].since for a in flicker] == [NEW - 220, NEW - 220, None]


def test_a_clear_under_way_is_carried_on_with_the_standing_drift():
    drifting = drifting_assessment()                              # sw1 and sw-b.2 drift; back in band at OLD
    conditions = cond.merge([], 1, "t", **with_drift(cond.ready(), drifting))
    clearing = assess(subjects({"sw1": 10.0, "sw-b.2": 10.0, "sw3": 10.0}),
                      subjects({"sw1": 9.5, "sw-b.2": 20.0, "sw3": 10.0}), drifting.memory, OLD, RULES)
    written, memory = takeover(clearing, at=40, conditions=conditions)
    assert written["pending"] == [{"switch": "sw1", "direction": SERVE, "toward": "Clear",
                                   "since": "2026-11-18T11:06:40Z"}]
    assert memory == subjects({"sw1": SwitchDrift(True, NEW - 40, NEW + CARRY), "sw-b.2": SwitchDrift(True)})
    after = run({"sw1": 10.0, "sw-b.2": 10.0}, [(NEW, {"sw1": None, "sw-b.2": None}),
                                                 (NEW + 20, {"sw1": 9.5, "sw-b.2": 20.0})],
                memory=memory)
    assert after[0].drifting and after[1].cleared == (("sw1", SERVE),)   # 60 s after the clear began


def test_seed_leaves_out_streaks_it_cannot_trust():
    pending = {"pending": [
        {"switch": "sw1", "direction": SERVE, "toward": "Clear", "since": "2026-11-18T11:06:40Z"},  # not drifting
        {"switch": "sw2", "direction": "in", "toward": "Drift", "since": "yesterday"},
        {"switch": "sw3", "direction": "out", "toward": "Drift", "since": "2026-11-18T12:00:00Z"},  # in the future
    ]}
    memory = seed([], pending, now=NEW, offset=WALL - NEW, rules=RULES)
    assert memory == {("sw3", "out"): SwitchDrift(False, NEW, NEW + CARRY)}
    assert seed(None, None) == {} and drift_status({}, offset=0.0) == {"pending": []}


def test_predictions_read_the_fair_share_figures_of_the_status_plan():
    plan = {"switches": [{"name": "sw1", "serveGbps": 12.5, "fairInGbps": 3, "fairOutGbps": 4, "inGbps": 30,
                          "outGbps": 40},
                         {"name": "sw2", "serveGbps": 0, "fairInGbps": 0, "fairOutGbps": 0}]}
    assert predictions(plan) == {("sw1", SERVE): 12.5, ("sw1", "in"): 3.0, ("sw1", "out"): 4.0,
                                 ("sw2", SERVE): 0.0, ("sw2", "in"): 0.0, ("sw2", "out"): 0.0}
    assert predictions({"switches": [{"name": "sw1", "inGbps": 3}]}) is None   # a plan without the fair share
    assert predictions({"switches": [{"name": "sw1", "serveGbps": 3}]}) is None
    assert predictions(None) is None


def test_observations_join_served_and_uplinks():
    assert observations({"sw1": 2.0, "sw2": None}, {("sw1", "out"): 1.5}) == {
        ("sw1", SERVE): 2.0, ("sw2", SERVE): None, ("sw1", "out"): 1.5}


def test_rules_come_from_the_environment():
    settings = Settings.from_environment({"SWITCHYARD_DRIFT_THRESHOLD": "0.4", "SWITCHYARD_DRIFT_SUSTAIN_SECONDS": "600",
                                          "SWITCHYARD_DRIFT_CHECK": "false"})
    assert settings.drift == DriftRules(threshold=0.4, sustain_seconds=600)
    assert settings.drift_check is False
    assert Settings.from_environment({}).drift == DriftRules() and Settings.from_environment({}).drift_check


def test_the_metrics_reference_states_the_default_rules():
    import re

    from switchyard.generate.docs import DRIFT

    stated = {name.lower(): float(value) for name, value in
              re.findall(r"`SWITCHYARD_DRIFT_([A-Z_]+)` \(([\d.]+)", DRIFT.replace("\n", " "))}
    defaults = {name: getattr(DriftRules(), name) for name in DriftRules.__dataclass_fields__}
    assert stated == {**defaults, "read_seconds": Settings().drift_read_seconds}
