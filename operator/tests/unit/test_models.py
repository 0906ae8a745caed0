"""Model validation: what the operator refuses even if the API server let it through."""

import pytest
from pydantic import ValidationError

from switchyard.api import AnalysisFacilitySpec, WorkerFleetSpec, XCachePoolSpec
from switchyard.api.base import wire_name


def pool(**extra):
    return {"facilityRef": {"name": "af"}, "origin": {"host": "origin.example.org"}, **extra}


def test_wire_names_spell_units():
    assert wire_name("memory_gib") == "memoryGiB"
    assert wire_name("block_size_kib") == "blockSizeKiB"
    assert wire_name("uplink_gbps") == "uplinkGbps"


def test_defaults_fill_in():
    spec = XCachePoolSpec.model_validate(pool())
    assert spec.pfc.block_size_kib == 1024 and spec.port == 1094
    assert spec.to_wire()["pfc"]["blockSizeKiB"] == 1024


@pytest.mark.parametrize("body,field", [
    (pool(pfc={"lowWatermark": 0.9, "highWatermark": 0.9}), None),
    (pool(unknown=1), "unknown"),
    (pool(storage={"dataPaths": ["relative/path"]}), "dataPaths"),
    (pool(storage={"dataPaths": ["/ok", "/bad path"]}), "dataPaths"),
    (pool(image="img;reboot"), "image"),
    (pool(pfc={"blockSizeKiB": 6}), "blockSizeKiB"),
])
def test_invalid_pools(body, field):
    with pytest.raises(ValidationError) as err:
        XCachePoolSpec.model_validate(body)
    if field:
        assert field in str(err.value)


def test_fleet_needs_exactly_one_engine():
    base = {"facilityRef": {"name": "af"}}
    WorkerFleetSpec.model_validate({**base, "dask": {"schedulerAddress": "tcp://s.example:8786"}})
    for bad in ({}, {"dask": {"createScheduler": True}, "taskvine": {"managerHost": "m.example"}}):
        with pytest.raises(ValidationError) as err:
            WorkerFleetSpec.model_validate({**base, **bad})
        assert "exactly one engine section" in str(err.value)
    with pytest.raises(ValidationError):
        WorkerFleetSpec.model_validate({**base, "dask": {"schedulerAddress": "tcp://bad address:1"}})


def test_cel_rules_run_in_the_models_too():
    with pytest.raises(ValidationError) as err:
        XCachePoolSpec.model_validate(pool(pfc={"lowWatermark": 0.97, "highWatermark": 0.9}))
    assert "lowWatermark must be below" in str(err.value)
    with pytest.raises(ValidationError) as err:
        AnalysisFacilitySpec.model_validate({
            "network": {"switches": [{"name": "a", "uplinkGbps": 1}]},
            "cachePools": [{"name": "p", "origin": {"host": "o"}}],
            "fleets": [{"name": "f", "pool": "q", "dask": {"createScheduler": True}}]})
    assert "every fleet's pool must name one of spec.cachePools" in str(err.value)


def test_facility_requires_switches():
    with pytest.raises(ValidationError) as err:
        AnalysisFacilitySpec.model_validate({"network": {"switches": []}})
    assert "switches" in str(err.value)
