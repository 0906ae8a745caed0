"""An analysis team's own WorkerFleet: attached to a facility, placed with it, scaled by kubectl."""

from __future__ import annotations

import json

import pytest

import localcluster

from facilities import facility
from support import condition, ready_condition, wait_for, wait_ready

from switchyard.rampup import most_starts

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

    # A HorizontalPodAutoscaler drives the same scale subresource (kube-controller-manager's
    # own HPA controller; with no metrics server it still enforces min and max replicas).
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "team", "namespace": namespace},
           "spec": {"scaleTargetRef": {"apiVersion": "switchyard.dev/v1alpha1", "kind": "WorkerFleet", "name": "team"},
                    "minReplicas": 11, "maxReplicas": 12,
                    "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                                                                  "target": {"type": "Utilization", "averageUtilization": 80}}}]}}
    localcluster.kubectl(cluster.name, "apply", "-f", "-", input=json.dumps(hpa))
    wait_for(lambda: fleet_ready(11), timeout=180, what="the HPA scaling the team fleet up to its minimum, 11")
    hpa["spec"].update(minReplicas=2, maxReplicas=5)
    localcluster.kubectl(cluster.name, "apply", "-f", "-", input=json.dumps(hpa))
    wait_for(lambda: fleet_ready(5), timeout=180, what="the HPA scaling the team fleet down to its maximum, 5")
    wait_for(lambda: running_workers(cluster, namespace, "team") == 5, what="5 running team workers")


def test_two_hundred_workers_land_as_planned_within_the_start_rate(cluster, operator, namespace):
    rate = 10
    af = facility(workers=0)
    af["metadata"]["namespace"] = namespace
    af["spec"]["fleets"] = []
    cluster.kube.apply(af)
    fleet = team_fleet(namespace, 200)
    fleet["spec"].update({"cores": 1, "memoryGiB": 1, "readGbps": 0.1,
                          "rampUp": {"maxStartsPerSecond": rate, "jitterSeconds": 5}})
    cluster.kube.apply(fleet)

    def landed():
        wf = cluster.kube.get("WorkerFleet", namespace, "team")
        status = wf.get("status") or {}
        return wf if status.get("readyReplicas") == 200 and ready_condition(wf).get("status") == "True" else None
    wf = wait_for(landed, timeout=240, what="200 ready workers")

    # Running pods per switch are what the plan says.
    planned = {s["switch"]: s["desired"] for s in wf["status"]["switches"]}
    pods = [p for p in cluster.kube.list("Pod", namespace, {"switchyard.dev/fleet": "team"})
            if p["status"].get("phase") == "Running"]
    running: dict[str, int] = {}
    for pod in pods:
        running[pod["metadata"]["labels"]["switchyard.dev/switch"]] = running.get(pod["metadata"]["labels"]["switchyard.dev/switch"], 0) + 1
    assert running == {sw: n for sw, n in planned.items() if n} and sum(planned.values()) == 200

    # The ramp, as the limiter promises it (rampup.most_starts): from the ramp's start, no more workers
    # asked for than a new ramp's burst plus the rate since. The ramp starts after the fleet was created,
    # and each Pod after the write that asked for it (the ReplicaSet controller may lag, never lead), so by
    # the API server's clock the n-th Pod, created before its stamp's second ends, must have had
    # most_starts(rate, that end - the fleet's stamp, from_ramp_start=True) >= n. (Not per window of the
    # Pods' own stamps: a lagging controller bunches creations the limiter spread out; and a cycle of
    # reconciles 2-4 s apart starts 2-4 s of the rate at once, by design: rampup.CATCH_UP_SECONDS.)
    # A limiter that does not limit fails this as soon as the control plane creates Pods faster than the rate.
    created = _epoch(wf["metadata"]["creationTimestamp"])
    stamps = sorted(_epoch(p["metadata"]["creationTimestamp"]) for p in pods)
    ahead = [(n, stamp - created) for n, stamp in enumerate(stamps, 1)
             if n > most_starts(rate, stamp + 1 - created, from_ramp_start=True)]
    assert not ahead, f"(n-th pod, seconds after the fleet) created ahead of the start rate: {ahead[:10]}"

    # Every worker waits its own jitter before the engine starts.
    init = pods[0]["spec"]["initContainers"][0]
    assert init["name"] == "jitter" and init["args"][-1] == "5"

    cluster.kubectl("scale", "workerfleet", "team", "-n", namespace, "--replicas", "120")
    wait_for(lambda: running_workers(cluster, namespace, "team") == 120, timeout=120, what="scale-down to 120")


def _epoch(timestamp: str) -> float:
    import datetime
    return datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def test_a_fleet_too_big_for_the_nodes_runs_what_fits_and_says_so(cluster, operator, namespace):
    af = facility(workers=1)
    af["metadata"]["namespace"] = namespace
    cluster.kube.apply(af)
    fleet = team_fleet(namespace, 10)
    fleet["spec"].update(cores=60, memoryGiB=8)  # one per 64-core worker node, none beside a cache: 6 fit
    cluster.kube.apply(fleet)

    def insufficient():
        obj = cluster.kube.get("WorkerFleet", namespace, "team")
        return obj if ready_condition(obj).get("reason") == "InsufficientCapacity" else None

    obj = wait_for(insufficient, timeout=120, what="team fleet Ready=False InsufficientCapacity")
    assert ready_condition(obj)["message"].startswith("4 of 10 workers fit no node")
    wait_for(lambda: running_workers(cluster, namespace, "team") == 6, what="the 6 workers that fit, running")
    degraded = wait_for(lambda: (c := condition(cluster.kube.get("AnalysisFacility", namespace, "af"), "Degraded"))
                        .get("status") == "True" and c, what="facility Degraded")
    assert degraded["reason"] == "WorkersUnplaced" and "fleet team: 4 worker(s) fit no node" in degraded["message"]

    # Scaled to what fits, the fleet is Ready and the facility healthy again.
    cluster.kubectl("scale", "workerfleet", "team", "-n", namespace, "--replicas", "6")
    wait_for(lambda: ready_condition(cluster.kube.get("WorkerFleet", namespace, "team")).get("status") == "True",
             timeout=120, what="team fleet Ready at 6")
    assert condition(wait_ready(cluster, namespace), "Degraded")["status"] == "False"
