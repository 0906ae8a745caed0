"""Uplink drift (switchyard.observe.drift): each direction of each uplink judged like a switch's serve, same rules."""

from __future__ import annotations

import pytest

from switchyard import conditions as cond
from switchyard.observe.drift import REASON, SERVE, DriftRules, SwitchDrift, assess, cautions, seed, with_drift

RULES = DriftRules()
# Two switches serving as planned, so the facility is busy; rack-b's uplink is predicted 7.5 Gbps inbound.
SERVES = {("rack-a", SERVE): 10.0, ("rack-b", SERVE): 10.0}
PREDICTED = {**SERVES, ("rack-b", "in"): 7.5, ("rack-b", "out"): 0.5, ("rack-a", "out"): 7.5}


def run(steps, predicted=PREDICTED, memory=None, rules=RULES):
    """Assess at each (time, uplink observations) with both switches serving as planned."""
    memory, out = dict(memory or {}), []
    for now, uplinks in steps:
        result = assess(predicted, {**SERVES, **uplinks}, memory, now, rules)
        memory = result.memory
        out.append(result)
    return out


def drifting(result) -> list:
    return [v.subject for v in result.drifting]


def test_an_uplink_drifts_only_after_the_sustain_time_and_says_which_direction():
    steps = run([(t, {("rack-b", "in"): 3.1, ("rack-a", "out"): 7.5}) for t in range(0, 301, 15)])
    assert [drifting(s) for s in steps[:-1]] == [[]] * (len(steps) - 1)
    assert drifting(steps[-1]) == [("rack-b", "in")] and steps[-1].began == (("rack-b", "in"),)
    [verdict] = steps[-1].drifting
    assert verdict.ratio == pytest.approx(3.1 / 7.5)
    assert "uplink rack-b in carried 3.10 Gbps, predicted 7.50 (ratio 0.41)" in steps[-1].message()
    assert "rack-a" not in steps[-1].message()
    # Carrying too much is as wrong as too little; an interruption restarts the clock.
    assert run([(0, {("rack-a", "out"): 11.0}), (300, {("rack-a", "out"): 11.0})])[-1].began == (("rack-a", "out"),)
    interrupted = run([(t, {("rack-b", "in"): 7.0 if t == 150 else 3.1}) for t in range(0, 301, 15)])
    assert not interrupted[-1].drifting


def test_an_uplink_clears_only_within_the_narrower_band():
    standing = {("rack-b", "in"): SwitchDrift(True)}
    held = run([(t, {("rack-b", "in"): 6.0}) for t in range(0, 600, 15)], memory=standing)   # ratio 0.8
    assert all(drifting(s) == [("rack-b", "in")] for s in held) and not any(s.cleared for s in held)
    back = run([(t, {("rack-b", "in"): 7.0}) for t in range(0, 61, 15)], memory=standing)    # ratio 0.93
    assert [bool(s.drifting) for s in back] == [True, True, True, True, False]
    assert back[-1].cleared == (("rack-b", "in"),)


def test_an_uplink_the_plan_keeps_idle_drifts_when_it_carries_traffic():
    # rack-b out is predicted 0.5 Gbps (below the 1 Gbps floor): carrying 5 Gbps for the sustain time is
    # the wrong-labels case, judged against the floor (off by 4.5 Gbps of at least 1).
    steps = run([(t, {("rack-b", "out"): 5.0}) for t in range(0, 301, 15)])
    assert drifting(steps[-2]) == [] and drifting(steps[-1]) == [("rack-b", "out")]
    assert "uplink rack-b out carried 5.00 Gbps, predicted 0.50" in steps[-1].message()


def test_an_uplink_predicted_and_measured_below_the_floor_is_not_judged():
    steps = run([(t, {("rack-b", "out"): 0.9}) for t in range(0, 601, 15)])
    assert not any(s.drifting for s in steps)
    verdict = next(v for v in steps[-1].verdicts if v.subject == ("rack-b", "out"))
    assert not verdict.judged and verdict.observed == 0.9
    # Within the floor-relative band (|1.2 - 0.5| / 1 = 0.7 > 0.25 drifts; |0.6 - 0.5| / 1 = 0.1 does not).
    assert drifting(run([(0, {("rack-b", "out"): 1.2}), (300, {("rack-b", "out"): 1.2})])[-1]) == [("rack-b", "out")]
    assert not run([(0, {("rack-b", "out"): 0.6}), (300, {("rack-b", "out"): 0.6})])[-1].drifting


def test_an_idle_facility_judges_no_uplink_and_a_standing_uplink_drift_clears():
    quiet = {("rack-a", SERVE): 0.1, ("rack-b", SERVE): 0.2, ("rack-b", "in"): 0.0, ("rack-a", "out"): 0.0}
    memory = {("rack-b", "in"): SwitchDrift(True)}
    result = assess(PREDICTED, quiet, memory, 0, RULES)
    assert result.idle and result.cleared == (("rack-b", "in"),) and not result.drifting
    assert not any(v.judged for v in result.verdicts)
    # Idleness is what the caches serve: a busy uplink does not make an idle facility busy.
    loud = {**quiet, ("rack-b", "in"): 50.0}
    steps = [assess(PREDICTED, loud, {}, t, RULES) for t in (0, 600)]
    assert all(s.idle and not s.drifting for s in steps)


def test_an_unmeasured_direction_keeps_its_verdict_and_restarts_its_streak():
    # observed_uplinks leaves out a direction whose hosts are not all measured: absent, not zero.
    steps = run([(0, {("rack-b", "in"): 3.0}), (200, {}), (300, {("rack-b", "in"): 3.0}),
                 (500, {("rack-b", "in"): 3.0}), (600, {("rack-b", "in"): 3.0})])
    assert [bool(s.drifting) for s in steps] == [False, False, False, False, True]
    unmeasured = next(v for v in steps[1].verdicts if v.subject == ("rack-b", "in"))
    assert unmeasured.observed is None and not unmeasured.judged
    kept = run([(0, {})], memory={("rack-b", "in"): SwitchDrift(True)})[0]
    assert drifting(kept) == [("rack-b", "in")] and not kept.cleared


def test_message_names_serve_and_uplink_drifts_and_seed_reads_both_back():
    # rack-a serves half its prediction; rack-b's uplink carries 0.41 of its inbound prediction.
    predicted = {**PREDICTED, ("rack-c", SERVE): 10.0}
    observed = {**SERVES, ("rack-a", SERVE): 5.0, ("rack-c", SERVE): 10.0, ("rack-b", "in"): 3.1,
                ("rack-a", "out"): 7.5}
    first = assess(predicted, observed, {}, 0, RULES)
    result = assess(predicted, observed, first.memory, 300, RULES)
    assert drifting(result) == [("rack-a", SERVE), ("rack-b", "in")]
    states = with_drift(cond.ready("3 children ready"), result)
    degraded = states["Degraded"]
    assert (degraded.status, degraded.reason) == (True, REASON)
    assert "switch rack-a served 5.00 Gbps, predicted 10.00 (ratio 0.50)" in degraded.message
    assert "uplink rack-b in carried 3.10 Gbps, predicted 7.50 (ratio 0.41)" in degraded.message
    remembered = {("rack-a", SERVE): SwitchDrift(True), ("rack-b", "in"): SwitchDrift(True)}
    assert seed(cond.merge([], 1, "2026-11-23T00:00:00Z", **states)) == remembered
    # Behind another Degraded reason, both still come back.
    other = cond.ready()
    other["Degraded"] = cond.State(True, "NodesNotReady", "1 node(s) NotReady: switch rack-x served nothing")
    assert seed(cond.merge([], 1, "t", **with_drift(other, result))) == remembered
    # A restart seeded from the condition keeps the drift while the bytes still disagree: no new event.
    again = assess(predicted, observed, seed(cond.merge([], 1, "t", **states)), 315, RULES)
    assert drifting(again) == drifting(result) and not again.began and not again.cleared


def test_a_low_uplink_the_plan_cautions_about_is_named_with_the_caution():
    """status.plan's fullBothWays / fullHostsBehindIn tag a low reading with what such uplinks carried when
    measured (so 0.41 is seen not to be that), not a high one, and stay short."""
    plan = {"switches": [{"name": "rack-b", "fullBothWays": True, "fullHostsBehindIn": 2},
                         {"name": "rack-a", "fullHostsBehindOut": 1}, {"name": "rack-c"}]}
    why = cautions(plan)
    assert sorted(why) == [("rack-a", "out"), ("rack-b", "in"), ("rack-b", "out")]
    assert why[("rack-b", "in")] == ("full behind 2 cache host(s) at their cap, measured 0.86-0.92; "
                                     "full both ways, measured 0.75-0.86 on BBR cache nodes")
    assert why[("rack-b", "out")] == "full both ways, measured 0.75-0.86 on BBR cache nodes"
    predicted = {**PREDICTED, ("rack-b", "out"): 7.5}
    low = {("rack-b", "in"): 3.1, ("rack-b", "out"): 5.0, ("rack-a", "out"): 7.5}
    first = assess(predicted, {**SERVES, **low}, {}, 0, RULES, why)
    result = assess(predicted, {**SERVES, **low}, first.memory, 300, RULES, why)
    message = result.message()
    assert "uplink rack-b in carried 3.10 Gbps, predicted 7.50 (ratio 0.41) [plan caution: full behind 2" in message
    assert "uplink rack-b out carried 5.00 Gbps, predicted 7.50 (ratio 0.67) [plan caution: full both ways" in message
    assert max(len(v.describe()) for v in result.drifting) < 200        # many fit in the Degraded message
    # the caution does not hide the drift, and seed reads both back from the condition
    remembered = {("rack-b", "in"): SwitchDrift(True), ("rack-b", "out"): SwitchDrift(True)}
    assert seed(cond.merge([], 1, "t", **with_drift(cond.ready(), result))) == remembered
    # a direction reading high is not excused by it
    high = {("rack-a", "out"): 11.0}
    result = assess(PREDICTED, {**SERVES, **high}, assess(PREDICTED, {**SERVES, **high}, {}, 0, RULES, why).memory,
                    300, RULES, why)
    assert drifting(result) == [("rack-a", "out")] and "caution" not in result.message()
    assert cautions(None) == {} and cautions({"switches": []}) == {}
