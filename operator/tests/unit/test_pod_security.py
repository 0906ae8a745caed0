"""Least privilege on every pod switchyard makes (issue 26, part 2), read from the rendered manifests.

Walks every pod template the operator would create (rendered.workloads: the examples,
MinIO, TaskVine, a gateway cluster) and the chart's own pods (`helm template`), so a
new pod without these settings fails here before it reaches a cluster. The cache
hosts (builders/xcachepool.py) are left out: host network and host paths by design,
their settings tracked in issue 26 and e2e/test_least_privilege.py.

e2e/test_least_privilege.py dry-runs the same pods under Pod Security `restricted`.
"""

from __future__ import annotations

import copy

import pytest

import rendered
from test_chart import by_kind, render

# The chart's pods that call the API server, and so need a ServiceAccount token: component -> why.
API_CALLERS = {
    "operator": "the operator: kopf watches, server-side apply, status patches",
    "dask-gateway": "dask-gateway's backend creates clusters (the Role in gateway.yaml)",
}


def _set(container: dict, pod: dict, key: str):
    """A container's effective security setting: its own, else the pod's."""
    own = container.get("securityContext", {})
    return own[key] if key in own else pod.get("securityContext", {}).get(key)


def violations(pod: dict, *, token_allowed: bool = False) -> list[str]:
    """What a pod template does that least privilege forbids (empty: nothing)."""
    spec = pod["spec"]
    found = []
    if spec.get("automountServiceAccountToken") is not (True if token_allowed else False):
        found.append(f"automountServiceAccountToken is {spec.get('automountServiceAccountToken')!r}"
                     f" (want {token_allowed})")
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            found.append(f"{key}")
    found += [f"volume {v['name']}: hostPath" for v in spec.get("volumes", []) if "hostPath" in v]
    pod_sc = spec.get("securityContext", {})
    if pod_sc.get("runAsUser") is not None and pod_sc.get("runAsGroup") is None:
        found.append("pod: runAsUser without runAsGroup")
    for c in rendered.containers(spec):
        where, sc = f"container {c['name']}", c.get("securityContext", {})
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{where}: allowPrivilegeEscalation is not false")
        if sc.get("privileged"):
            found.append(f"{where}: privileged")
        caps = sc.get("capabilities", {})
        if caps.get("drop") != ["ALL"] or caps.get("add"):
            found.append(f"{where}: capabilities {caps} (want drop [ALL], add nothing)")
        if _set(c, pod["spec"], "runAsNonRoot") is not True:
            found.append(f"{where}: runAsNonRoot is not true")
        if _set(c, pod["spec"], "runAsUser") == 0:
            found.append(f"{where}: runAsUser 0")
        if (_set(c, pod["spec"], "seccompProfile") or {}).get("type") != "RuntimeDefault":
            found.append(f"{where}: seccompProfile is not RuntimeDefault")
        if "runAsUser" in sc and "runAsGroup" not in sc and pod_sc.get("runAsGroup") is None:
            found.append(f"{where}: runAsUser without runAsGroup")
    return found


def is_dask_scheduler(container: dict) -> bool:
    return [*container.get("command", []), *container.get("args", [])][:2] == ["dask", "scheduler"]


def probe_port_problems(container: dict) -> list[str]:
    """Readiness and liveness probes present, each on a port the container declares."""
    named = {p["name"] for p in container.get("ports", [])} | {p["containerPort"] for p in container.get("ports", [])}
    found = []
    for kind in ("readinessProbe", "livenessProbe"):
        probe = container.get(kind)
        if not probe:
            found.append(f"container {container['name']}: no {kind}")
            continue
        action = probe.get("tcpSocket") or probe.get("httpGet") or {}
        if action.get("port") not in named:
            found.append(f"container {container['name']}: {kind} on {action.get('port')!r}, not a declared port")
    return found


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> list[tuple[str, dict]]:
    """(source and object name, object) of every workload the operator generates, cache hosts aside."""
    tmp = tmp_path_factory.mktemp("render")
    return [(f"{source}: {o['kind']} {o['metadata']['name']}", o)
            for source, objs in rendered.workloads(tmp).items() for o in objs
            if rendered.pod_template(o) is not None and not rendered.is_cache_pod(o)]


def test_the_walk_covers_every_kind_of_generated_pod(generated):
    # If a pod kind disappears from the renders, the walk below would pass without looking at it.
    components = {rendered.pod_template(o)["metadata"]["labels"].get(rendered.COMPONENT) for _, o in generated}
    assert components == {"scheduler", "worker", "minio"}
    pods = [rendered.pod_template(o)["spec"] for _, o in generated]
    commands = {c["command"][0] for p in pods for c in p["containers"]}
    assert {"dask", "vine_worker", "minio"} <= commands
    assert any(c["name"] == "jitter" for p in pods for c in p.get("initContainers", []))
    schedulers = [c for p in pods for c in p["containers"] if is_dask_scheduler(c)]
    assert len(schedulers) >= 3  # the example's, the wide facility's and the gateway cluster's


def test_every_generated_pod_is_least_privilege(generated):
    problems = [f"{what}: {v}" for what, obj in generated for v in violations(rendered.pod_template(obj))]
    assert problems == []


def test_every_dask_scheduler_has_probes_on_its_own_ports(generated):
    problems = [f"{what}: {p}" for what, obj in generated
                for c in rendered.pod_template(obj)["spec"]["containers"] if is_dask_scheduler(c)
                for p in probe_port_problems(c)]
    assert problems == []


@pytest.mark.parametrize("change, expected", [
    (lambda c, p: c["securityContext"].pop("capabilities"), "capabilities"),
    (lambda c, p: c["securityContext"].update(allowPrivilegeEscalation=True), "allowPrivilegeEscalation"),
    (lambda c, p: c["securityContext"].pop("runAsGroup"), "runAsUser without runAsGroup"),
    (lambda c, p: [c["securityContext"].pop("seccompProfile"), p["securityContext"].pop("seccompProfile")],
     "seccompProfile"),
    (lambda c, p: p.update(automountServiceAccountToken=True), "automountServiceAccountToken"),
    (lambda c, p: p.update(hostNetwork=True), "hostNetwork"),
    (lambda c, p: c["securityContext"]["capabilities"].update(add=["NET_ADMIN"]), "capabilities"),
])
def test_a_pod_missing_a_setting_is_found(generated, change, expected):
    # The checker itself can fail: each setting removed from a real generated pod is reported.
    _, worker = next((w, o) for w, o in generated if o["metadata"]["labels"].get(rendered.COMPONENT) == "worker")
    pod = copy.deepcopy(rendered.pod_template(worker))
    assert violations(pod) == []
    change(pod["spec"]["containers"][0], pod["spec"])
    assert any(expected in v for v in violations(pod)), violations(pod)


def test_a_scheduler_without_probes_is_found(generated):
    _, obj = next((w, o) for w, o in generated if any(is_dask_scheduler(c) for c in o["spec"]["template"]["spec"]["containers"]))
    container = copy.deepcopy(obj["spec"]["template"]["spec"]["containers"][0])
    assert probe_port_problems(container) == []
    container["livenessProbe"]["httpGet"]["port"] = "nope"
    del container["readinessProbe"]
    assert len(probe_port_problems(container)) == 2


# ------------------------------------------------------------------ the chart's own pods
@pytest.mark.parametrize("values", [(), ("gateway.enabled=true", "gateway.facility=af")],
                         ids=["default", "gateway"])
def test_the_charts_pods_are_least_privilege_with_liveness_probes(values):
    docs = render(*values)
    pods = [(d["metadata"]["name"], rendered.pod_template(d)) for d in docs if rendered.pod_template(d) is not None]
    assert {name for name, _ in pods} == ({"rel-switchyard", "rel-switchyard-gateway"} if values else {"rel-switchyard"})
    assert len(by_kind(docs, "Deployment")) == len(pods)
    problems = []
    for name, pod in pods:
        # Both call the API server with their own ServiceAccount: the token is mounted on purpose.
        assert pod["metadata"]["labels"][rendered.COMPONENT] in API_CALLERS, name
        problems += [f"{name}: {v}" for v in violations(pod, token_allowed=True)]
        problems += [f"{name}: container {c['name']}: no {probe}" for c in rendered.containers(pod["spec"])
                     for probe in ("livenessProbe", "readinessProbe") if probe not in c]
    assert problems == []
