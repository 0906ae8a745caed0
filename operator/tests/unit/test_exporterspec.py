"""The exporter serves exactly the families exporterspec declares (the metrics reference and dashboards read the declaration)."""

from switchyard.observe.exporter import ExporterSettings, XCacheCollector
from switchyard.observe.exporterspec import FAMILIES, LABELS, PREFIX
from switchyard.xrootd.monitoring import Summary


def test_the_collector_serves_every_declared_family_and_no_other():
    collector = XCacheCollector(ExporterSettings(pool="p", host="h", switch="s", data_paths=("/",), meta_paths=("/",),
                                                 low_watermark=0.9, high_watermark=0.95))
    collector.totals.add(Summary(source="", program="xrootd", instance="", pid=0, started=0, reported=0,
                                 connections=0, connections_total=0, bytes_received=0, bytes_sent=0, open_files=0))
    collector.last_summary_at = collector.served_at = 0.0
    served = {family.name: family for family in collector.collect()}
    assert set(served) == {PREFIX + name for name in FAMILIES}
    for name, spec in FAMILIES.items():
        family = served[PREFIX + name]
        assert (family.type, family.documentation) == (spec.type, spec.documentation)
        for sample in family.samples:
            assert set(sample.labels) <= {*LABELS, *spec.labels}
