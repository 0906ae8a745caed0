"""Offline: a facility file on a topology file → every manifest it would become.

It calls the very desired-state functions the handlers call (switchyard.desired),
on a cluster as the topology file describes it with nothing running yet, so the
preview cannot drift from what the operator creates. Secrets' keys are shown as
placeholders: they are read from (or generated into) Secrets on a cluster.
"""

from __future__ import annotations

from ..api import S3StagingSpec
from ..builders.s3staging import build_staging
from ..desired import Outcome, policy_peers
from ..desired.facility import desired_facility
from ..desired.workerfleet import desired_fleet, fleet_intent
from ..desired.xcachepool import desired_pool
from ..policy.settings import Settings
from ..topology import load_facility, load_topology, read_yaml

PLACEHOLDER_KEYS = ("<accessKey from the Secret>", "<secretKey from the Secret>")


class RenderError(ValueError):
    """The facility cannot be rendered: the reason a cluster would report as its Ready condition."""


def _nodes(topology_path: str):
    return load_topology(read_yaml(topology_path) or {}, topology_path).node_infos()


def _children(outcome: Outcome, what: str) -> list[dict]:
    if not outcome.converges:
        ready = outcome.states["Ready"]
        raise RenderError(f"{what}: Ready={'True' if ready.status else 'False'} {ready.reason}: {ready.message}")
    return outcome.children


def render_files(facility_path: str, topology_path: str, settings: Settings | None = None) -> list[dict]:
    """The facility's children and theirs, as the operator would apply them on that topology."""
    doc, _ = load_facility(facility_path)  # InputError (a ValueError) names the file and field
    return render(doc, _nodes(topology_path), settings)


def render(doc: dict, nodes: list, settings: Settings | None = None) -> list[dict]:
    """The children of a facility object and theirs, as the operator would apply them on these nodes."""
    settings = settings or Settings()
    name = doc["metadata"]["name"]
    namespace = doc["metadata"].get("namespace", "default")
    children = _children(desired_facility(name, doc["spec"], None, nodes, [], [], settings), f"AnalysisFacility {name}")
    by_name = {(c["kind"], c["metadata"]["name"]): c for c in children}
    out = []
    for child in children:
        child["metadata"]["namespace"] = namespace
        out.append(child)
        child_name, what = child["metadata"]["name"], f"{child['kind']} {child['metadata']['name']}"
        if child["kind"] == "XCachePool":
            grandchildren = _children(desired_pool(child_name, namespace, child["spec"], child["status"], {}, nodes,
                                                   settings), what)
        elif child["kind"] == "WorkerFleet":
            staging = child["spec"].get("staging")
            intent = fleet_intent(child_name, namespace, child["spec"], child["status"], settings,
                                  staging=by_name.get(("S3Staging", staging)) if staging else None)
            if isinstance(intent, Outcome):
                _children(intent, what)
            grandchildren = _children(desired_fleet(child_name, namespace, intent, intent.plan.workers, {}, settings,
                                                    nodes),
                                      what)
        else:
            spec = S3StagingSpec.model_validate(child["spec"])
            grandchildren = build_staging(child_name, namespace, spec, PLACEHOLDER_KEYS,
                                          PLACEHOLDER_KEYS if spec.embedded else None, policy_peers(settings))
        for obj in grandchildren:
            obj["metadata"]["namespace"] = namespace
        out.extend(grandchildren)
    return out
