"""The xrootd config renderer: golden files for representative pools, and what it refuses.

Regenerate the golden files after an intended change with
`SWITCHYARD_UPDATE_GOLDEN=1 python3 -m pytest tests/unit/test_xrootd_config.py`
and review the diff.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from switchyard.api.xcachepool import XCachePoolBody
from switchyard.observe.exporter import parse_args
from switchyard.observe.exporterspec import exporter_args
from switchyard.xrootd import config_checksum, render_config, render_scitokens_config
from switchyard.xrootd.config import directories_to_create

GOLDEN = Path(__file__).parent / "golden"

POOLS = {
    # The defaults a site gets from a minimal pool: one disk, fixed origin.
    "minimal": {"origin": {"host": "origin.example.org"}},
    # A UChicago-like host: four NVMe disks, 1 MiB blocks without prefetch (ATLAS defaults).
    "four-disks-tuned": {
        "port": 1095,
        "origin": {"host": "redirector.example.org", "port": 1094},
        "storage": {"dataPaths": ["/mnt/nvme0", "/mnt/nvme1", "/mnt/nvme2", "/mnt/nvme3"], "metaPath": "/mnt/nvme-meta"},
        "pfc": {"blockSizeKiB": 1024, "prefetchBlocks": 0, "ramGiB": 16, "lowWatermark": 0.85,
                "highWatermark": 0.92, "purgeIntervalSeconds": 120, "writeQueueBlocks": 64, "writeQueueThreads": 8},
        "resources": {"cpu": "8", "memory": "48Gi"},
    },
    "forwarding": {"origin": {"mode": "forward"}, "storage": {"dataPaths": ["/data/xcache"], "metaPath": "/data/meta"}},
    "scitokens": {
        "origin": {"host": "origin.example.org"},
        "auth": {"mode": "scitokens", "issuers": ["https://cms-auth.web.cern.ch/", "https://wlcg.cloud.cnaf.infn.it/"],
                 "audiences": ["https://wlcg.cern.ch/jwt/v1/any"], "tlsSecret": "xcache-host-cert"},
    },
}


def _pool(name: str) -> XCachePoolBody:
    return XCachePoolBody.model_validate(POOLS[name])


def _check_golden(path: Path, text: str) -> None:
    if os.environ.get("SWITCHYARD_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"{path.name} missing: run with SWITCHYARD_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"rendering differs from {path.name}"


@pytest.mark.parametrize("name", sorted(POOLS))
def test_config_matches_golden(name):
    _check_golden(GOLDEN / f"xcache-{name}.cfg", render_config(_pool(name)))


def test_scitokens_file_matches_golden():
    _check_golden(GOLDEN / "xcache-scitokens-scitokens.cfg", render_scitokens_config(_pool("scitokens")))


def test_no_scitokens_file_without_auth():
    assert render_scitokens_config(_pool("minimal")) == ""
    assert "ofs.authorize" not in render_config(_pool("minimal"))


def test_every_data_disk_is_a_data_space():
    text = render_config(_pool("four-disks-tuned"))
    spaces = re.findall(r"^oss\.space data (\S+)$", text, flags=re.M)
    assert spaces == ["/mnt/nvme0", "/mnt/nvme1", "/mnt/nvme2", "/mnt/nvme3"]
    assert re.findall(r"^oss\.space meta (\S+)$", text, flags=re.M) == ["/mnt/nvme-meta/meta"]
    assert "oss.localroot /mnt/nvme-meta/namespace" in text
    assert directories_to_create(_pool("four-disks-tuned")) == ["/mnt/nvme-meta/namespace", "/mnt/nvme-meta/meta"]


def test_monitoring_aims_at_the_exporter_port():
    text = render_config(_pool("minimal"), exporter_port=19931, report_interval_seconds=3)
    assert "xrd.report 127.0.0.1:19931 every 3s all" in text
    assert re.search(r"^xrootd\.monitor .* dest fstat user pfc 127\.0\.0\.1:19931$", text, flags=re.M)
    # The f-stream's open records name the file (the per-file read load needs its path), and its
    # transfer records come every interval.
    assert re.search(r"^xrootd\.monitor .* fstat 3s lfn xfr 1 ", text, flags=re.M)
    assert re.search(r"^xrootd\.mongstream pfc use .* 127\.0\.0\.1:19931$", text, flags=re.M)


def test_rendering_is_deterministic_and_the_checksum_follows_the_text():
    first, second = render_config(_pool("four-disks-tuned")), render_config(_pool("four-disks-tuned"))
    assert first == second
    assert config_checksum(first) == config_checksum(second) == hashlib.sha256(first.encode()).hexdigest()
    changed = XCachePoolBody.model_validate({**POOLS["four-disks-tuned"], "port": 1096})
    assert config_checksum(render_config(changed)) != config_checksum(first)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"pfc": {"prefetchBlocks": 129}}, "prefetchBlocks"),
        ({"pfc": {"ramGiB": 257}}, "ramGiB"),
        ({"pfc": {"purgeIntervalSeconds": 59}}, "purgeIntervalSeconds"),
        ({"pfc": {"purgeIntervalSeconds": 3601}}, "purgeIntervalSeconds"),
        ({"pfc": {"writeQueueBlocks": 1025}}, "writeQueueBlocks"),
        ({"pfc": {"writeQueueThreads": 65}}, "writeQueueThreads"),
        ({"pfc": {"blockSizeKiB": 6}}, "blockSizeKiB"),
        ({"pfc": {"blockSizeKiB": 524292}}, "blockSizeKiB"),
        ({"pfc": {"lowWatermark": 0.95, "highWatermark": 0.95}}, "lowWatermark must be below"),
        ({"pfc": {"ramGiB": 16}, "resources": {"memory": "16Gi"}}, "must be below resources.memory"),
        ({"origin": {"mode": "fixed"}}, "origin.host is required"),
        ({"storage": {"dataPaths": ["/mnt/a", "/mnt/a"]}}, "must not repeat"),
        ({"storage": {"dataPaths": ["/mnt/a"], "metaPath": "/mnt/a"}}, "metaPath must differ"),
        ({"storage": {"dataPaths": ["/mnt/a b"]}}, "dataPaths"),
        ({"storage": {"dataPaths": ["/mnt/a\npss.origin evil"]}}, "dataPaths"),
        ({"auth": {"mode": "scitokens", "tlsSecret": "t"}}, "at least one issuer"),
        ({"auth": {"mode": "scitokens", "issuers": ["https://a.example"]}}, "tlsSecret is required"),
        ({"auth": {"mode": "scitokens", "issuers": ["http://a.example"], "tlsSecret": "t"}}, "issuers"),
        ({"origin": {"host": "origin.example.org; rm"}}, "origin.host"),
    ],
)
def test_values_xrootd_cannot_take_are_refused_by_the_model(change, message):
    spec = {**POOLS["minimal"], **change}
    with pytest.raises(ValidationError) as error:
        XCachePoolBody.model_validate(spec)
    assert message in str(error.value)


def test_bounds_are_inclusive_at_what_xrootd_accepts():
    edge = {**POOLS["minimal"], "pfc": {"blockSizeKiB": 524288, "prefetchBlocks": 128, "ramGiB": 1,
                                         "purgeIntervalSeconds": 3600, "writeQueueBlocks": 1024, "writeQueueThreads": 64}}
    text = render_config(XCachePoolBody.model_validate(edge))
    assert "pfc.blocksize 524288k" in text and "pfc.prefetch 128" in text and "pfc.writequeue 1024 64" in text


@pytest.mark.parametrize("kwargs", [{"exporter_port": 0}, {"exporter_port": 70000}, {"host_name": "a b"},
                                    {"report_interval_seconds": 0}, {"tls_dir": "relative"}, {"tls_dir": "/x\nxrd.port 1"}])
def test_render_arguments_are_checked(kwargs):
    with pytest.raises(ValueError):
        render_config(_pool("minimal"), **kwargs)


_directive = re.compile(r"^(?:#.*|[a-z]+\.[a-z_]+(?: [^\s]+)*)?$")


@settings(max_examples=60, deadline=None)
@given(
    disks=st.lists(st.from_regex(r"/mnt/[a-z0-9]{1,8}", fullmatch=True), min_size=1, max_size=8, unique=True),
    block_kib=st.integers(1, 131072).map(lambda n: n * 4),
    prefetch=st.integers(0, 128),
    marks=st.tuples(st.floats(0.01, 0.98), st.floats(0.001, 0.5)).map(lambda t: (t[0], min(1.0, t[0] + t[1]))),
    interval=st.integers(60, 3600),
)
def test_any_valid_pool_renders_one_directive_per_line(disks, block_kib, prefetch, marks, interval):
    pool = XCachePoolBody.model_validate({
        "origin": {"host": "origin.example.org"},
        "storage": {"dataPaths": disks, "metaPath": "/meta"},
        "pfc": {"blockSizeKiB": block_kib, "prefetchBlocks": prefetch, "lowWatermark": marks[0],
                "highWatermark": marks[1], "purgeIntervalSeconds": interval},
    })
    text = render_config(pool)
    assert all(_directive.match(line) for line in text.splitlines()), text
    assert len(re.findall(r"^oss\.space data ", text, flags=re.M)) == len(disks)
    low, high = re.search(r"^pfc\.diskusage (\S+) (\S+) purgeinterval (\d+)$", text, flags=re.M).groups()[:2]
    assert float(low) < float(high) <= 1.0


def test_exporter_args_describe_the_same_disks_and_water_marks():
    pool = _pool("four-disks-tuned")
    args = parse_args(exporter_args(pool, pool_name="fast", switch="sw1", exporter_port=19931, metrics_port=19933))
    assert (args.pool, args.switch, args.udp, args.metrics_port) == ("fast", "sw1", ("127.0.0.1", 19931), 19933)
    assert args.data_path == list(pool.storage.data_paths)
    assert args.meta_path == ["/mnt/nvme-meta/meta"]
    assert (args.low_watermark, args.high_watermark) == (0.85, 0.92)
