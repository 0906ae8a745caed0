"""An analysis team's own WorkerFleet: attached to a facility, placed with it, scaled by kubectl."""

from __future__ import annotations

import pytest

from facilities import facility
from support import ready_condition, wait_for, wait_ready

pytestmark = pytest.mark.e2e


def team_fleet(namespace: str, replicas: int) -> dict:
    return {
        "apiVersion": "switchyard.dev/v1alpha1", "kind": "WorkerFleet",
        "metadata": {"name": "team", "namespace": namespace},
        "spec": {"facilityRef": {"name": "af"}, "replicas": replicas, "cores": 2, "memoryGiB": 4, "readGbps": 1,
                 "taskvine": {"managerHost": "manager.example.org", "managerPort": 9123}},
    }


def running_workers(cluster, namespace, fleet):
    return sum(1 for p in cluster.kube.list("Pod", namespace, {"switchyard.dev/fleet": fleet})
               if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"))


def test_standalone_fleet_is_placed_and_scales(cluster, operator, namespace):
    af = facility(workers=3)
    af["metadata"]["namespace"] = namespace
    cluster.kube.apply(af)
    cluster.kube.apply(team_fleet(namespace, 4))

    def fleet_ready(n):
        fleet = cluster.kube.get("WorkerFleet", namespace, "team")
        status = fleet.get("status") or {}
        return fleet if ready_condition(fleet).get("status") == "True" and status.get("readyReplicas") == n else None

    fleet = wait_for(lambda: fleet_ready(4), what="team fleet Ready with 4 workers")
    assert fleet["status"]["engine"] == "taskvine"
    assert running_workers(cluster, namespace, "team") == 4
    # The facility counts the team's workers in its plan.
    wait_for(lambda: cluster.kube.get("AnalysisFacility", namespace, "af")["status"].get("workers") == 7,
             what="facility plan with 3 + 4 workers")

    cluster.kubectl("scale", "workerfleet", "team", "-n", namespace, "--replicas", "9")
    wait_for(lambda: fleet_ready(9), timeout=120, what="team fleet Ready with 9 workers")
    wait_for(lambda: running_workers(cluster, namespace, "team") == 9, what="9 running team workers")
    wait_ready(cluster, namespace)
    assert cluster.kubectl("get", "workerfleet", "team", "-n", namespace,
                           "-o", "jsonpath={.status.replicas}") == "9"
