"""desired/ringload.py: the load-fed ring weights' rule, and that it does not oscillate under a steady load."""

from __future__ import annotations

import random

import pytest

from switchyard.desired.ringload import (Counter, RingLoad, RingLoadRules, factors, next_load, seeded,
                                         served_counters, served_gbps)

RING = {"a": 1.0, "b": 1.0, "c": 1.0}
CAPS = dict.fromkeys(RING, 10.0)
READ_SECONDS = 30.0
GIGA_BYTES = 1e9 / 8  # bytes in one Gb


def run(load, reads: int, state: RingLoad | None = None, start: float = 0.0, noise: float = 0.0, seed: int = 1):
    """Read `reads` times every READ_SECONDS; `load(factors)` -> host -> Gbps served under those factors.
    Returns the final state and the factors after each read."""
    state = state or RingLoad()
    rng = random.Random(seed)
    at = start if state.at is None else state.at
    counters = dict(state.counters) or {h: Counter(0.0, 1.0) for h in RING}
    history = []
    for _ in range(reads):
        at += READ_SECONDS
        served = load(factors(state))
        counters = {h: Counter(counters[h].served_bytes + max(0.0, served[h] + rng.uniform(-noise, noise))
                               * READ_SECONDS * GIGA_BYTES, 1.0) for h in RING}
        state = next_load(state, counters, at, RING, CAPS)
        history.append(factors(state))
    return state, history


def uniform(total: float, extra: dict[str, float] | None = None):
    """`total` Gbps spread by the effective weights, plus `extra` Gbps on some hosts whatever the weights."""
    def load(lowered):
        weights = {h: w * lowered.get(h, 1.0) for h, w in RING.items()}
        return {h: total * w / sum(weights.values()) + (extra or {}).get(h, 0.0) for h, w in weights.items()}
    return load


def stepped(before: dict[str, float], after: dict[str, float]):
    """Served Gbps `before` while host a is at factor 1, `after` once it is lowered at all (a discrete move)."""
    return lambda lowered: after if lowered.get("a", 1.0) < 1.0 else before


# Host a holds a 4 Gbps file that moves to b once a is lowered: a 9 of planned 5.7 (17 / 3), then 5 (0.88x).
chunky = stepped({"a": 9.0, "b": 2.0, "c": 6.0}, {"a": 5.0, "b": 6.0, "c": 6.0})


def changes(history, last: dict | None = None) -> list[dict]:
    out, last = [], last or {}
    for f in history:
        if f != last:
            out.append(f)
        last = f
    return out


def test_served_gbps_from_counter_deltas_and_none_across_a_restart():
    before = {"a": Counter(0.0, 1.0), "b": Counter(5e9, 1.0), "c": Counter(1e9, 1.0)}
    after = {"a": Counter(1.25e9 * 30, 1.0), "b": Counter(1e9, 1.0), "c": Counter(2e9, 2.0)}
    assert served_gbps(before, after, 30.0) == {"a": 10.0}  # b went back, c's exporter restarted
    assert served_gbps(before, after, 0.0) == {}


def test_served_counters_sum_the_reader_switches_of_the_pool():
    text = ('switchyard_xcache_served_bytes_total{pool="p",host="a",switch="s1",client_switch="s1"} 100\n'
            'switchyard_xcache_served_bytes_total{pool="p",host="a",switch="s1",client_switch="unknown"} 20\n'
            'switchyard_xcache_served_bytes_total{pool="other",host="a",switch="s1",client_switch="s1"} 999\n'
            'switchyard_xcache_exporter_start_time_seconds{pool="p",host="a",switch="s1"} 1700000000\n')
    assert served_counters([text, "not { metrics"], "p") == {"a": Counter(120.0, 1700000000.0)}


def test_a_host_over_its_share_while_others_have_room_is_lowered_in_steps_to_the_floor():
    state, history = run(uniform(15.0, {"a": 6.0}), reads=80)  # a 11 of planned 7, b and c 5 of cap 10
    steps = changes(history)
    assert [f["a"] for f in steps] == [0.9, 0.8, 0.7, 0.6, 0.5]
    assert all(set(f) == {"a"} for f in steps)
    first = history.index({"a": 0.9})
    assert first == RingLoadRules().reads  # the first read only takes the counters, then 3 reads over
    assert history[first + 1:first + 6] == [{"a": 0.9}] * 5  # settle_seconds (180 s) before the next streak


def test_no_lowering_without_room_elsewhere_or_on_a_host_that_is_not_busy():
    _, crowded = run(uniform(27.0, {"a": 3.0}), reads=30)  # a 12, b and c 9 of cap 10: no room
    assert crowded[-1] == {}
    _, idle = run(uniform(6.0, {"a": 2.0}), reads=30)  # a 4 of planned 2.7, but 0.4 of its cap
    assert idle[-1] == {}


def test_a_discrete_move_does_not_flip_back_and_forth():
    """Lowered, host a falls to 5 of planned 5.7, below the restore band (0.9x): its step's shed (4) says a
    restore would bring back 9, so it stays lowered: one change, then none."""
    _, history = run(chunky, reads=200, noise=0.3)
    assert changes(history) == [{"a": 0.9}]


def test_a_noisy_steady_load_around_the_thresholds_changes_nothing_after_the_first_step():
    """Host a at 7.9 +- 0.25 around the over line (1.1 x 20.8 / 3 = 7.6, +-0.3 with the total's noise): a streak
    of 3 reads over comes, and one step takes it to 6.8 +- 0.25, inside the bands (restore at 6.2, over at 7.6;
    every host under it): nothing moves again, whatever the noise."""
    load = stepped({"a": 7.9, "b": 5.9, "c": 7.0}, {"a": 6.8, "b": 7.0, "c": 7.0})
    for seed in range(5):
        _, history = run(load, reads=300, noise=0.25, seed=seed)
        assert changes(history) == [{"a": 0.9}], seed


def test_a_load_that_goes_away_restores_step_by_step():
    lowered, history = run(uniform(15.0, {"a": 6.0}), reads=80)
    assert factors(lowered) == {"a": 0.5}
    _, after = run(uniform(1.0), reads=80, state=lowered)
    assert [f.get("a", 1.0) for f in changes(after, {"a": 0.5})] == [0.6, 0.7, 0.8, 0.9, 1.0]
    assert after[-1] == {}


def test_a_skew_that_leaves_restores_while_the_rest_of_the_demand_stays():
    lowered, _ = run(chunky, reads=40)
    assert factors(lowered) == {"a": 0.9}
    # The moved file stopped (b back to 2): the total fell by its 4 Gbps, taken from the shed first, so a
    # restore would bring back nothing, and a (4.5) is quiet. Scaled by the total instead, the shed would
    # still predict 7.4 (4 x 12.5 / 17 + 4.5).
    _, after = run(lambda f: {"a": 4.5, "b": 2.0, "c": 6.0}, reads=40, state=lowered)
    assert after[-1] == {}


def test_a_read_missing_a_host_moves_nothing_and_restarts_the_streaks():
    state, _ = run(uniform(15.0, {"a": 6.0}), reads=3)
    assert state.hosts["a"].over == 2
    partial = {h: c for h, c in state.counters.items() if h != "c"}
    after = next_load(state, partial, state.at + 30, RING, CAPS)
    assert after.hosts["a"].over == 0 and factors(after) == {}


def test_a_host_out_of_the_ring_forgets_its_steps():
    state, _ = run(uniform(15.0, {"a": 6.0}), reads=10)
    assert factors(state) == {"a": 0.9}
    after = next_load(state, state.counters, state.at + 30, {"b": 1.0, "c": 1.0}, CAPS)
    assert factors(after) == {}


def test_seeded_from_the_status_factors():
    assert factors(seeded({"a": 0.7, "b": 0.5, "c": 0.2})) == {"a": 0.7, "b": 0.5, "c": 0.5}
    assert factors(seeded({})) == {}


@pytest.mark.parametrize("bad", [dict(restore_share=1.2), dict(quiet_share=0.8), dict(step=0.6), dict(reads=0)])
def test_rules_refuse_bands_without_gaps(bad):
    with pytest.raises(ValueError):
        RingLoadRules(**bad)
