"""kube-score over everything switchyard ships or makes (issue 26, part 5).

What is scored: the chart as `helm template` renders it (default values, and with the
gateway on), and every object the operator would apply for the example facilities and
the other renders of rendered.workloads (MinIO, TaskVine, a gateway cluster). Each
finding that stays is listed in kube_score_allow.yaml with its reason; a finding the
file does not list fails, and so does an entry no finding needs any more (the file
only shrinks as things are fixed).

kube-score is the pinned binary `bash hack/build-tools.sh` builds into
~/.cache/switchyard/bin (skipped when it is missing, failed in CI).
"""

from __future__ import annotations

import fnmatch
import json
import pathlib
import subprocess
from dataclasses import dataclass

import pytest
import yaml

import rendered
from test_chart import pinned_binary, render

ALLOW_FILE = pathlib.Path(__file__).with_name("kube_score_allow.yaml")
KUBERNETES_VERSION = "v1.31"
OPTIONAL_CHECKS = ("container-seccomp-profile",)  # off by default in kube-score; everything here sets it
CHART_VALUES = {"chart (default values)": (), "chart (gateway on)": ("gateway.enabled=true", "gateway.facility=af")}
ENTRY_KEYS = {"kind", "name", "component", "check", "container", "summary", "reason"}


def kube_score_binary() -> str:
    return pinned_binary("kube-score")


@dataclass(frozen=True)
class Finding:
    source: str
    kind: str
    name: str
    component: str
    check: str
    container: str  # '' for a finding about the object, not one container
    summary: str

    def __str__(self) -> str:
        where = f" ({self.container})" if self.container else ""
        return f"{self.source}: {self.kind} {self.name}{where}: {self.check}: {self.summary}"


def score(source: str, objs: list[dict], tmp: pathlib.Path) -> list[Finding]:
    """kube-score's findings (every check not OK and not skipped) on the objects, as one input."""
    path = tmp / "objects.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    args = [kube_score_binary(), "score", "--output-format", "json", "--kubernetes-version", KUBERNETES_VERSION,
            *(a for check in OPTIONAL_CHECKS for a in ("--enable-optional-test", check)), str(path)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    # It exits 1 when it finds something: its JSON on stdout is the answer either way.
    assert result.returncode in (0, 1) and result.stdout.startswith("["), result.stderr
    found = []
    for obj in json.loads(result.stdout):
        kind, meta = obj["type_meta"]["kind"], obj["object_meta"]
        component = (meta.get("labels") or {}).get(rendered.COMPONENT, "")
        for check in obj["checks"]:
            if check["skipped"] or check["grade"] >= 10:
                continue
            comments = check["comments"] or [{"path": "", "summary": "(no comment)"}]
            found += [Finding(source, kind, meta["name"], component, check["check"]["id"], c.get("path", ""),
                              c["summary"]) for c in comments]
    return sorted(set(found), key=str)


def scored_sources(tmp: pathlib.Path) -> dict[str, list[dict]]:
    """Source name -> the objects scored together (one namespace, one kube-score run)."""
    sources = {name: render(*values) for name, values in CHART_VALUES.items()}
    sources.update(rendered.workloads(tmp))
    return sources


def load_allow() -> list[dict]:
    return yaml.safe_load(ALLOW_FILE.read_text())["allow"]


def matches(entry: dict, finding: Finding) -> bool:
    return (entry["kind"] == finding.kind and entry["check"] == finding.check
            and fnmatch.fnmatchcase(finding.name, entry.get("name", "*"))
            and entry.get("component", finding.component) == finding.component
            and fnmatch.fnmatchcase(finding.container, entry.get("container", "*"))
            and fnmatch.fnmatchcase(finding.summary, entry.get("summary", "*")))


def unexplained(findings: list[Finding], entries: list[dict]) -> list[str]:
    return [str(f) for f in findings if not any(matches(e, f) for e in entries)]


@pytest.fixture(scope="module")
def findings(tmp_path_factory) -> list[Finding]:
    tmp = tmp_path_factory.mktemp("kube-score")
    out = []
    for i, (source, objs) in enumerate(scored_sources(tmp).items()):
        (tmp / str(i)).mkdir()
        out += score(source, objs, tmp / str(i))
    return out


def test_the_allow_file_gives_a_reason_for_each_entry():
    checks = {line.split(",")[0] for line in subprocess.run(
        [kube_score_binary(), "list"], capture_output=True, text=True, check=True).stdout.splitlines()}
    for entry in load_allow():
        assert set(entry) <= ENTRY_KEYS and {"kind", "check", "reason"} <= set(entry), entry
        assert entry["check"] in checks, f"not a kube-score check: {entry}"
        assert len(entry["reason"]) > 20, f"say why: {entry}"


def test_no_finding_outside_the_allow_file(findings):
    # Every source was scored and said something (an empty run would pass vacuously).
    sources = {f.source for f in findings}
    assert set(CHART_VALUES) <= sources and {e.name for e in rendered.EXAMPLES} <= sources, sources
    assert unexplained(findings, load_allow()) == []


def test_every_allow_entry_is_still_needed(findings):
    stale = [e for e in load_allow() if not any(matches(e, f) for f in findings)]
    assert stale == [], "nothing needs these entries any more: delete them from kube_score_allow.yaml"


def _without_seccomp(pod: dict) -> None:
    pod["securityContext"].pop("seccompProfile")
    pod["containers"][0]["securityContext"].pop("seccompProfile")


@pytest.mark.parametrize("plant, check", [
    (lambda pod: pod["containers"][0]["securityContext"].update(privileged=True), "container-security-context-privileged"),
    (_without_seccomp, "container-seccomp-profile"),
    (lambda pod: pod["containers"][0].update(image="ghcr.io/dask/dask:latest"), "container-image-tag"),
    (lambda pod: pod["containers"][0]["resources"].pop("limits"), "container-resources"),
], ids=["privileged", "no-seccomp", "latest-tag", "no-limits"])
def test_a_planted_regression_is_a_new_finding(tmp_path, plant, check):
    # The comparison can fail: a generated scheduler made worse shows up as a finding the file does not allow.
    objs = rendered.workloads(tmp_path)[rendered.EXAMPLES[0].name]
    allowed = load_allow()
    assert unexplained(score("planted", objs, tmp_path), allowed) == []
    scheduler = next(o for o in objs if o["kind"] == "Deployment"
                     and o["metadata"]["labels"].get(rendered.COMPONENT) == "scheduler")
    plant(scheduler["spec"]["template"]["spec"])
    after = unexplained(score("planted", objs, tmp_path), allowed)
    assert after and all(check in line and scheduler["metadata"]["name"] in line for line in after), after
