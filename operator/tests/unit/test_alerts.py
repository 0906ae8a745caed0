"""The alert rules (generate/alerts.py → charts/switchyard/rules/alerts.yaml) under promtool.

`promtool check rules` on the generated file, `promtool test rules` on
operator/tests/promtool/alerts_test.yaml, and a check that every alert has a
case there expecting it to fire and one expecting it silent, each of which
catches a rule that always fires or never does. promtool is Debian's
`prometheus` package (`make deps`): skipped when missing, failed in CI.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

from switchyard.generate import alerts, dashboards
from switchyard.observe.metrics import series_names

REPO = pathlib.Path(__file__).resolve().parents[3]
RULES = REPO / alerts.RULES_FILE
TESTS = REPO / "operator" / "tests" / "promtool" / "alerts_test.yaml"
OUTSIDE = {"up"}   # Prometheus' own series the rules may use


def promtool() -> str:
    path = shutil.which("promtool")
    if path:
        return path
    message = "promtool is missing: run `make deps` (Debian's prometheus package)"
    pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)


def run(*args: str, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def _cases() -> list[dict]:
    return yaml.safe_load(TESTS.read_text())["tests"]


def test_rules_pass_promtool_check():
    result = run("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts.alerts())} rules found" in result.stdout, result.stdout


def test_promtool_unit_tests_pass():
    result = run("test", "rules", str(TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_test_file_reads_the_generated_rules():
    (path,) = yaml.safe_load(TESTS.read_text())["rule_files"]
    assert (TESTS.parent / path).resolve() == RULES.resolve()


def test_every_alert_has_a_firing_and_a_silent_case():
    firing, silent = set(), set()
    for case in _cases():
        for check in case["alert_rule_test"]:
            (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {a.name for a in alerts.alerts()}
    assert names - firing == set(), f"no promtool case expects these to fire: {sorted(names - firing)}"
    assert names - silent == set(), f"no promtool case expects these silent: {sorted(names - silent)}"
    assert firing | silent <= names, f"cases for alerts that do not exist: {sorted((firing | silent) - names)}"


def _only(alertname: str, want_firing: bool) -> list[dict]:
    """The test cases, each cut to its checks of `alertname` that expect it firing (or silent)."""
    out = []
    for case in _cases():
        checks = [c for c in case["alert_rule_test"]
                  if c["alertname"] == alertname and bool(c.get("exp_alerts")) == want_firing]
        if checks:
            out.append({**case, "alert_rule_test": checks})
    return out


def _mutated(tmp_path: pathlib.Path, alertname: str, expr: str, cases: list[dict]) -> subprocess.CompletedProcess:
    """promtool test rules with `alertname`'s expression replaced, on `cases` only."""
    groups = yaml.safe_load(RULES.read_text())
    for group in groups["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == alertname:
                rule["expr"] = expr
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(groups))
    test = yaml.safe_load(TESTS.read_text())
    test.update(rule_files=["rules.yaml"], tests=cases)
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    return run("test", "rules", "test.yaml", cwd=tmp_path)


@pytest.mark.parametrize("alertname", [a.name for a in alerts.alerts()])
def test_the_cases_catch_a_rule_that_always_or_never_fires(tmp_path, alertname):
    firing, silent = _only(alertname, True), _only(alertname, False)
    assert firing and silent
    unchanged = next(a.expr for a in alerts.alerts() if a.name == alertname)
    # The cut-down files pass with the real rule (so a failure below is the mutation's) ...
    for cases in (firing, silent):
        result = _mutated(tmp_path, alertname, unchanged, cases)
        assert result.returncode == 0, result.stdout + result.stderr
    # ... and fail when it never fires, or always does (some silent case is past the alert's `for`).
    never = _mutated(tmp_path, alertname, "vector(1) > 2", firing)
    assert never.returncode != 0, f"{alertname}: no firing case notices a rule that never fires"
    always = _mutated(tmp_path, alertname, "vector(1)", silent)
    assert always.returncode != 0, f"{alertname}: no silent case notices a rule that always fires"


def test_every_metric_an_alert_uses_is_exported():
    known = series_names() | OUTSIDE
    for alert in alerts.alerts():
        names = dashboards.metric_names(alert.expr)
        assert names, alert.name
        assert names <= known, f"{alert.name} uses {sorted(names - known)}, not in switchyard.observe.metrics.catalog()"


def test_every_alert_says_how_bad_where_and_what_to_do():
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    assert [r["alert"] for r in rules] == [a.name for a in alerts.alerts()]
    assert len({r["alert"] for r in rules}) == len(rules)
    docs = (REPO / "docs" / "metrics.md").read_text()
    for rule, alert in zip(rules, alerts.alerts()):
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], rule["alert"]
        assert annotations["runbook_url"].endswith("docs/metrics.md#" + rule["alert"].lower())
        assert f"\n### {rule['alert']}\n" in docs and alert.runbook in docs, f"{rule['alert']}: no runbook in docs/metrics.md"
        # Where: every label the alert keeps (its `by`) is named in its description.
        grouping = {label.strip() for clause in _by_clauses(rule["expr"]) for label in clause.split(",")}
        described = {label for label in grouping if "$labels." + label in annotations["description"]}
        assert described == grouping, f"{rule['alert']}: description does not say {sorted(grouping - described)}"


def _by_clauses(expr: str) -> list[str]:
    """The label lists of every `by (...)` clause of an expression (the labels an alert keeps)."""
    return [m.group(1) for m in re.finditer(r"\bby \(([^)]*)\)", expr)]
