"""pytest collects operator/tests and e2e together: test file basenames must be unique."""

import collections
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[3]


def test_test_module_names_are_unique():
    names = collections.Counter(p.name for root in ("operator/tests", "e2e") for p in (REPO / root).rglob("test_*.py"))
    assert not [n for n, count in names.items() if count > 1]


def test_make_test_runs_every_real_node_module_beside_the_rest():
    """`make test` runs the real-node modules (those that need SWITCHYARD_REAL_NODES) in a pytest of their
    own beside the rest, which ignores them: a module missing from REAL_NODE_TESTS would be skipped by
    both, one listed that needs no real nodes would run alone, with nothing to run beside."""
    makefile = (REPO / "Makefile").read_text()
    line = next(line for line in makefile.splitlines() if line.startswith("REAL_NODE_TESTS :="))
    listed = set(line.split(":=", 1)[1].split())
    needing = {f"e2e/{p.name}" for p in (REPO / "e2e").glob("test_*.py") if "SWITCHYARD_REAL_NODES" in p.read_text()}
    assert listed == needing
