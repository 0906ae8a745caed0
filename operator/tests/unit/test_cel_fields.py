"""The models evaluate their CRD's CEL rules offline on only the fields each rule reads."""

import pytest

from switchyard.api import AnalysisFacilitySpec
from switchyard.api.base import _fields_read


def test_a_rule_reads_the_fields_it_names_and_self_whole_when_it_names_none():
    assert _fields_read("!has(self.fleets) || self.fleets.all(f, self.cachePools.exists(p, p.name == f.pool))") \
        == frozenset({"fleets", "cachePools"})
    assert _fields_read("self == oldSelf") is None
    assert _fields_read("size(self) > 0 && self.a > 1") is None


def test_a_rule_on_some_fields_still_refuses_what_it_refused():
    network = {"switches": [{"name": f"sw{i}", "uplinkGbps": 10} for i in range(500)]}
    fleet = {"name": "d", "pool": "missing", "dask": {"createScheduler": True}}
    with pytest.raises(ValueError, match="every fleet's pool must name one of spec.cachePools"):
        AnalysisFacilitySpec.model_validate({"network": network, "fleets": [fleet],
                                             "cachePools": [{"name": "x", "origin": {"host": "o.example.org"}}]})
    assert AnalysisFacilitySpec.model_validate({"network": network, "fleets": [{**fleet, "pool": "x"}],
                                                "cachePools": [{"name": "x", "origin": {"host": "o.example.org"}}]})
