"""The closed queueing network of sequential readers (bench/closed_network.py), the bench's check of the
hypothesis that random host occupancy costs throughput near a cache host's cap."""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "bench"))

from closed_network import Readers, _many, delivered, exact, mean_readers  # noqa: E402


def hosts(n: int, gbps: float) -> dict[str, float]:
    return {f"h{i}": gbps for i in range(n)}


def even(caps: dict[str, float]) -> dict[str, float]:
    return dict.fromkeys(caps, 1 / len(caps))


def test_two_readers_two_hosts_by_hand():
    """2 readers of cap 0.75, 2 hosts of 1 Gbps, files split alike. Product form: f(0)=1,
    f(1)=0.5/0.75=2/3, f(2)=f(1)*0.5/min(1, 1.5)=1/3; states (2,0) (1,1) (0,2) weigh 1/3, 4/9, 1/3
    (G=10/9) and deliver 1, 1.5, 1 Gbps: (1/3 + 2/3 + 1/3) / (10/9) = 1.2, where the fluid model says 1.5."""
    caps = hosts(2, 1.0)
    readers = Readers(2, 0.75, even(caps))
    assert exact(caps, readers) == pytest.approx(1.2, rel=1e-12)
    assert delivered(caps, [readers]) == (pytest.approx(1.2, rel=1e-12),)


def test_equals_the_fluid_share_far_from_the_cap():
    caps = hosts(8, 100.0)                    # 8 x 100 Gbps against 60 readers x 0.7 = 42 Gbps
    readers = Readers(60, 0.7, even(caps))
    assert exact(caps, readers) == pytest.approx(42, rel=1e-9)
    assert _many(caps, [readers])[0] == pytest.approx(42, rel=1e-9)


@pytest.mark.parametrize("count", [20, 200, 2000])
def test_strictly_below_the_fluid_share_near_the_cap(count):
    caps = hosts(8, 45.0)                     # demand 340 Gbps against 360 of serving: 94% of the cap
    (got,) = delivered(caps, [Readers(count, 340 / count, even(caps))])
    assert got < 340 * 0.995


def test_monotone_in_capacity():
    readers = Readers(100, 3.4, even(hosts(8, 1)))
    got = [delivered(hosts(8, c), [readers])[0] for c in (40, 42.5, 45, 50, 60, 90)]
    assert all(a < b for a, b in zip(got, got[1:]))
    assert got[-1] == pytest.approx(340, rel=1e-4)            # 12.5 readers a host, 26 fill it: a tail


@pytest.mark.parametrize("count", [50, 200])
def test_the_many_reader_limit_is_near_the_exact_solution(count):
    caps = hosts(8, 45.0)
    readers = Readers(count, 340 / count, even(caps))
    assert _many(caps, [readers])[0] == pytest.approx(exact(caps, readers), rel=3 / count)


def test_alike_classes_are_solved_exactly_as_one_and_split_by_count():
    """Two racks of the same readers: one closed network of all of them, not the many-reader limit."""
    caps = hosts(2, 45.0)
    a, b = Readers(12, 6.0, even(caps)), Readers(36, 6.0, even(caps))
    got = delivered(caps, [a, b])
    whole = exact(caps, Readers(48, 6.0, even(caps)))
    assert got == (pytest.approx(whole / 4, rel=1e-12), pytest.approx(whole * 3 / 4, rel=1e-12))
    assert sum(delivered(caps, [Readers(12, 6.0, even(caps))] * 2)) == pytest.approx(exact(caps, Readers(24, 6.0, even(caps))))


def test_classes_keep_their_own_caps_and_hosts():
    """Two classes on disjoint hosts do not interact: each is its own single-class network."""
    caps = {"a": 10.0, "b": 100.0}
    one, two = Readers(400, 0.024, {"a": 1.0}), Readers(400, 0.2, {"b": 1.0})
    got = _many(caps, [one, two])
    assert got[1] == pytest.approx(80, rel=1e-6)             # far from its cap (5 sigma): all it asks
    assert got[0] == pytest.approx(_many(caps, [one])[0], rel=1e-6) and got[0] < 9.6


def test_mean_readers_of_one_host():
    assert mean_readers(5.0, 1.0, 100.0) == pytest.approx(5.0)              # no cap in reach: arrival / cap
    assert mean_readers(0.5, 2.0, 1.0) == pytest.approx(0.5 / (1 - 0.5))    # one reader fills it: M/M/1
    assert mean_readers(1.0, 0.5, 1.0) == float("inf")
