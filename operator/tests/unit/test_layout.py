"""pytest collects operator/tests and e2e together: test file basenames must be unique."""

import collections
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[3]


def test_test_module_names_are_unique():
    names = collections.Counter(p.name for root in ("operator/tests", "e2e") for p in (REPO / root).rglob("test_*.py"))
    assert not [n for n, count in names.items() if count > 1]
