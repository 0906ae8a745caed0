"""`switchyard render` is what the operator applies: every example, rendered offline and reconciled live.

Both call the same desired-state functions; this checks it end to end. The
example is rendered for the e2e topology (the cluster's own nodes), applied,
and once Ready every rendered object must exist with every field render set
(the API server adds defaults; quantities compare by value), and the operator
must own nothing render did not show.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

import localcluster
from support import TOPOLOGY, wait_ready
from switchyard.builders.common import FLEET_LABEL, POOL_LABEL
from switchyard.builders.xcachepool import client_map_name
from switchyard.observe.clientmap import KEY
from switchyard.cli.render import render_files
from switchyard.routing import parse_ring
from switchyard.topology import parse_quantity

pytestmark = pytest.mark.e2e

EXAMPLES = sorted(p for p in (localcluster.REPO / "examples").glob("*.yaml")
                  if (yaml.safe_load(p.read_text()) or {}).get("kind") == "AnalysisFacility")
OWNED_KINDS = ("XCachePool", "WorkerFleet", "S3Staging", "StatefulSet", "Deployment", "Service", "ConfigMap",
               "PodDisruptionBudget", "Secret", "NetworkPolicy")


def differences(rendered, live, path: str = "") -> list[str]:
    """Where `live` lacks or differs from what `rendered` sets (defaults the server adds are fine)."""
    if isinstance(rendered, dict):
        if not isinstance(live, dict):
            return [f"{path}: {live!r} is not an object"]
        return [d for key, value in rendered.items() for d in differences(value, live.get(key), f"{path}.{key}")]
    if isinstance(rendered, list):
        if not isinstance(live, list) or len(live) != len(rendered):
            return [f"{path}: {len(rendered)} items rendered, live has {live!r}"[:300]]
        return [d for i, (r, l) in enumerate(zip(rendered, live)) for d in differences(r, l, f"{path}[{i}]")]
    if ".resources." in path and isinstance(rendered, (str, int)) and live is not None:
        return [] if parse_quantity(str(rendered)) == parse_quantity(str(live)) else [f"{path}: {rendered} != {live}"]
    return [] if rendered == live else [f"{path}: rendered {rendered!r}, live {live!r}"]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_render_shows_exactly_what_the_operator_applies(cluster, operator, namespace, tmp_path, example):
    doc = yaml.safe_load(example.read_text())
    doc["metadata"]["namespace"] = namespace
    local = tmp_path / example.name
    local.write_text(yaml.safe_dump(doc))
    rendered = render_files(str(local), str(TOPOLOGY))
    cluster.kube.apply(doc)
    wait_ready(cluster, namespace, doc["metadata"]["name"])

    problems = []
    for obj in rendered:
        live = cluster.kube.get(obj["kind"], namespace, obj["metadata"]["name"])
        if live is None:
            problems.append(f"{obj['kind']} {obj['metadata']['name']}: rendered, not on the cluster")
            continue
        labels = obj["metadata"].get("labels", {})
        if obj["kind"] == "ConfigMap" and labels.get(FLEET_LABEL) and obj["metadata"]["name"].endswith("-routing"):
            # A fleet's ring names each cache host by its node and reaches it at the node's InternalIP, which a
            # topology file has not (offline: the node name): the same hosts, weights and switches.
            def ring(cm):
                return sorted((c.name, c.weight) for c in parse_ring(cm["data"]["ring"], allow_empty=True))
            if (ring(obj), obj["data"].get("switches")) != (ring(live), live["data"].get("switches")):
                problems.append(f"ConfigMap {obj['metadata']['name']}: ring {ring(obj)} != live {ring(live)}, "
                                f"switches {obj['data'].get('switches')!r} != {live['data'].get('switches')!r}")
            continue
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == client_map_name(labels.get(POOL_LABEL, "")):
            # The exporters' client map lists the cluster's node addresses, which a topology file has not:
            # offline it names the same switches, with no addresses.
            problems += [f"ConfigMap {obj['metadata']['name']}: switches {s}" for s in [
                (sorted(json.loads(obj["data"][KEY])["switches"]), sorted(json.loads(live["data"][KEY])["switches"]))]
                if s[0] != s[1]]
            continue
        for part in ("spec", "data", "status"):
            if part in obj:
                problems += [f"{obj['kind']} {obj['metadata']['name']}{d}"
                             for d in differences(obj[part], live.get(part), f".{part}")]
        problems += [f"{obj['kind']} {obj['metadata']['name']}{d}"
                     for d in differences(obj["metadata"].get("labels", {}), live["metadata"].get("labels"), ".labels")]
    shown = {(o["kind"], o["metadata"]["name"]) for o in rendered}
    owned = {(kind, o["metadata"]["name"]) for kind in OWNED_KINDS
             for o in cluster.kube.list(kind, namespace, {"app.kubernetes.io/managed-by": "switchyard"})}
    problems += [f"{kind} {name}: applied by the operator, not rendered" for kind, name in sorted(owned - shown)]
    assert problems == [], "\n".join(problems[:40])
