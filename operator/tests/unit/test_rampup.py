import os
import subprocess
import sys

from hypothesis import example, given, strategies as st

from switchyard.rampup import CATCH_UP_SECONDS, Bucket, jitter_seconds, most_starts, refill, resume, spend, step


def test_jitter_is_fixed_by_name_and_bounded():
    # Fixed by the name alone: the same in another process with another hash seed (a pod
    # that restarts waits as long as before), different for another name.
    code = "from switchyard.rampup import jitter_seconds; print(repr(jitter_seconds('w-1', 10)))"
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip()
            for seed in ("1", "2")}
    assert seen == {repr(jitter_seconds("w-1", 10))}
    assert jitter_seconds("w-1", 10) != jitter_seconds("w-2", 10)
    delays = [jitter_seconds(f"fleet-rack-a-{i}", 10) for i in range(1000)]
    assert all(0 <= d < 10 for d in delays)
    # Spread out, not clumped: every tenth of the window gets some workers.
    assert len({int(d) for d in delays}) == 10
    assert jitter_seconds("w-1", 0) == 0


def test_a_new_ramp_starts_with_one_seconds_burst():
    assert refill(None, 20, now=5.0) == Bucket(20, 5.0)
    assert refill(None, 0.5, now=5.0).tokens == 1


def test_tokens_accrue_at_the_rate_up_to_the_catch_up_span():
    bucket = spend(refill(None, 20, now=0.0), 20)
    assert bucket.tokens == 0
    assert refill(bucket, 20, now=0.3).tokens == 6
    assert refill(bucket, 20, now=3).tokens == 60
    assert refill(bucket, 20, now=30).tokens == 20 + 20 * CATCH_UP_SECONDS
    # Fractions are kept, not lost to rounding between short steps.
    partial = spend(refill(bucket, 20, now=0.33), 6)
    assert abs(refill(partial, 20, now=0.66).tokens - 7.2) < 1e-9  # 0.6 kept + 6.6


@given(steps=st.lists(st.tuples(st.floats(0, 2), st.integers(0, 100)), max_size=60), rate=st.floats(1, 200))
def test_starts_over_any_span_never_exceed_burst_plus_rate_times_span(steps, rate):
    """Spending only whole tokens, the starts in [0, t] are at most rate * t + one second's burst."""
    bucket, now, started = None, 0.0, 0
    for gap, wanted in steps:
        now += gap
        bucket = refill(bucket, rate, now)
        grant = min(wanted, int(bucket.tokens))
        bucket = spend(bucket, grant)
        started += grant
        assert started <= most_starts(rate, now, from_ramp_start=True) + 1e-6


@given(steps=st.lists(st.tuples(st.floats(0, 2), st.integers(0, 100)), min_size=1, max_size=60),
       takeover=st.integers(0, 59), gap=st.floats(0, 20), rate=st.floats(1, 200))
@example(steps=[(0, 100), (0.5, 100)], takeover=1, gap=0, rate=20)  # a burst spent, then a takeover at once
def test_a_ramp_taken_over_by_a_new_leader_keeps_to_one_burst_plus_the_rate(steps, takeover, gap, rate):
    """The old leader's bucket is lost with it; the new one resumes empty, so the starts of both in
    [0, t] stay within what one bucket allows (a new ramp's burst there would break this)."""
    bucket, now, started = None, 0.0, 0
    for i, (step_gap, wanted) in enumerate(steps):
        now += step_gap
        if i == takeover:
            now += gap
            bucket = resume(now)  # the new leader's first count of a ramp under way
        bucket = refill(bucket, rate, now)
        grant = min(wanted, int(bucket.tokens))
        bucket = spend(bucket, grant)
        started += grant
        assert started <= most_starts(rate, now, from_ramp_start=True) + 1e-6


@given(steps=st.lists(st.tuples(st.floats(0, 8), st.integers(0, 200)), min_size=1, max_size=60),
       rate=st.floats(1, 200))
@example(steps=[(0, 20), (8, 200), (0.5, 200)], rate=20)  # a burst, a stall past the catch-up span, a step
def test_starts_within_any_window_stay_within_most_starts(steps, rate):
    """Over any stretch of reconciles [t_i, t_j], the starts are at most most_starts(rate, t_j - t_i): the bucket's
    cap when the stretch begins, plus the rate over it."""
    bucket, now, grants = None, 0.0, []
    for gap, wanted in steps:
        now += gap
        bucket = refill(bucket, rate, now)
        grant = min(wanted, int(bucket.tokens))
        bucket = spend(bucket, grant)
        grants.append((now, grant))
    for i, (begin, _) in enumerate(grants):
        total = 0
        for end, grant in grants[i:]:
            total += grant
            assert total <= most_starts(rate, end - begin) + 1e-6
    # The bound is reached: a stall past CATCH_UP_SECONDS fills the bucket to what one window allows.
    full = refill(spend(refill(None, rate, 0.0), int(rate)), rate, CATCH_UP_SECONDS + 10)
    assert full.tokens == most_starts(rate, 0.0) > most_starts(rate, 0.0, from_ramp_start=True)


counts = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 500), min_size=1)


@given(planned=counts, current=counts, budget=st.integers(0, 300))
def test_step_never_exceeds_plan_or_budget(planned, current, budget):
    after = step(planned, current, budget)
    assert set(after) == set(planned)
    started = sum(max(0, after[sw] - min(current.get(sw, 0), planned[sw])) for sw in planned)
    assert started <= budget
    assert all(after[sw] <= planned[sw] for sw in planned)
    # Nothing is left unstarted while budget remains.
    if started < budget:
        assert after == planned


def test_step_scales_down_at_once_and_fills_the_biggest_gap_first():
    assert step({"a": 2, "b": 10}, {"a": 5, "b": 0}, 3) == {"a": 2, "b": 3}
    assert step({"a": 4, "b": 4}, {"a": 0, "b": 3}, 1) == {"a": 1, "b": 3}


@given(cycle=st.floats(0.05, CATCH_UP_SECONDS), rate=st.floats(1, 200))
@example(cycle=CATCH_UP_SECONDS, rate=1.5)  # fractions kept at the cap: whole tokens only are spent
def test_slow_reconcile_cycles_still_start_workers_at_the_rate(cycle, rate):
    """A loaded operator that reconciles every few seconds loses no starts.

    gateway.md found 500 workers starting at 6.5/s of a 20/s limit when the bucket
    held one second's worth and a cycle took ~3 s.
    """
    bucket, now, started = None, 0.0, 0
    while now < 60:
        bucket = refill(bucket, rate, now)
        grant = int(bucket.tokens)
        bucket = spend(bucket, grant)
        started += grant
        now += cycle
    elapsed = now - cycle
    assert started >= rate * elapsed - 1
