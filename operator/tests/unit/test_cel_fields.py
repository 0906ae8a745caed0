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


def test_the_cel_parser_read_back_from_its_cache_refuses_what_the_built_one_refuses(tmp_path, monkeypatch):
    import celpy
    from celpy.celparser import CELParser

    from switchyard.api import base

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(CELParser, "CEL_PARSER", None)
    rule = "self.a == true && !self.b.startsWith('x') && size(self.c) > 1"
    verdicts = []
    for _ in range(2):      # built and written, then read back from the file
        base._cel_parser.cache_clear()
        base._cel_program.cache_clear()
        CELParser.CEL_PARSER = None
        base._cel_parser()
        assert (tmp_path / "switchyard" / "cel-grammar.lark").stat().st_size > 0
        program = base._cel_program(rule)
        verdicts.append([bool(program.evaluate({"self": celpy.json_to_cel(doc)})) for doc in (
            {"a": True, "b": "y", "c": [1, 2]}, {"a": False, "b": "y", "c": [1, 2]}, {"a": True, "b": "xy", "c": [1, 2]})])
    assert verdicts == [[True, False, False]] * 2
    base._cel_program.cache_clear()


def test_no_cel_parser_cache_where_there_is_no_home_to_keep_it(tmp_path, monkeypatch):
    from switchyard.api import base

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(base.os.path, "expanduser", lambda path: path)     # a user without a passwd entry
    assert base._user_cache_file("cel-grammar.lark") is None and not list(tmp_path.iterdir())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert base._user_cache_file("x") == str(tmp_path / "cache" / "switchyard" / "x")
