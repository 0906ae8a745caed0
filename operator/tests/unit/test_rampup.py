from hypothesis import given, strategies as st

from switchyard.rampup import allowance, jitter_seconds, step


def test_jitter_is_fixed_by_name_and_bounded():
    assert jitter_seconds("w-1", 10) == jitter_seconds("w-1", 10)
    delays = [jitter_seconds(f"fleet-rack-a-{i}", 10) for i in range(1000)]
    assert all(0 <= d < 10 for d in delays)
    # Spread out, not clumped: every tenth of the window gets some workers.
    assert len({int(d) for d in delays}) == 10
    assert jitter_seconds("w-1", 0) == 0


def test_allowance_is_the_rate_over_elapsed_time_with_a_one_second_burst():
    assert allowance(20, None) == 20
    assert allowance(20, 0.5) == 10
    assert allowance(20, 30) == 20
    assert allowance(0.5, None) == 1


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
