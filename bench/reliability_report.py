"""bench/results/reliability.md from the figures the fault suite measured.

    SWITCHYARD_RELIABILITY_REPORT=1 pytest e2e/test_faults.py e2e/test_replan.py   # writes bench/results/reliability.json
    python bench/reliability_report.py [--json PATH] [--out PATH]

Only what the JSON holds is reported: nothing is estimated or filled in.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

from headline import about

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def _faults(entries: list[dict]) -> list[str]:
    lines = ["## Faults injected and survived", "",
             "| fault class | injected | survived | time to reconverge (s) | details |",
             "|---|---:|---:|---:|---|"]
    skip = {"class", "injected", "survived", "reconverge_seconds", "recorded"}
    # A test run again (one file re-run after a fix) replaces its earlier row.
    entries = list({e["class"]: e for e in entries}.values())
    for e in entries:
        details = ", ".join(f"{k}={v}" for k, v in sorted(e.items()) if k not in skip)
        lines.append(f"| {e['class']} | {e['injected']} | {e['survived']} | {e.get('reconverge_seconds', '')} | {details} |")
    total_in = sum(e["injected"] for e in entries)
    total_ok = sum(e["survived"] for e in entries)
    lines += ["", f"Total: {total_ok} of {total_in} injected faults survived (converged to the expected state, "
                  "no duplicate and no orphaned child).", ""]
    return lines


def _bad_input(entries: list[dict]) -> list[str]:
    lines = ["## Bad input", ""]
    for e in entries:
        lines += [f"{e['examples']} generated specs (hypothesis, seed {e['seed']}): {e['refused']} refused by the API "
                  f"server with a message, {e['accepted']} accepted and then answered by the operator with a Ready "
                  f"condition and a reason. {e['reference_objects_unchanged']} objects of a running reference "
                  f"facility in the same namespace were unchanged; {e['configmap_entries_scanned']} rendered "
                  "ConfigMap entries and every generated command line carried no injected string.", "",
                  "| input class | answer | count |", "|---|---|---:|"]
        for cls, answers in sorted(e["by_class"].items()):
            for answer, count in sorted(answers.items()):
                lines.append(f"| {cls} | {answer} | {count} |")
        lines += ["", "(An example may combine up to three classes; it is counted under each.)", ""]
        lines += _per_class(e)
    return lines


def _per_class(e: dict) -> list[str]:
    """One row per input class: what happened to every case of it."""
    harmed = 0 if "reference_objects_unchanged" in e else "?"
    crashed = e.get("operator_tracebacks", "not checked")
    lines = ["| input class | cases tried | refused at the API | answered Ready=False | answered Ready=True "
             "| harmed anything | crashed |", "|---|---:|---:|---:|---:|---:|---:|"]
    for cls, answers in sorted(e["by_class"].items()):
        tried = sum(answers.values())
        refused = answers.get("refused", 0)
        false = sum(n for a, n in answers.items() if a.startswith("accepted, Ready=False"))
        true = sum(n for a, n in answers.items() if a.startswith("accepted, Ready=True"))
        lines.append(f"| {cls} | {tried} | {refused} | {false} | {true} | {harmed} | {crashed} |")
    return lines + ["", "Harmed: objects of the running reference facility changed (the test fails on any). "
                        "Crashed: operator log files of the run holding a traceback (the test fails on any).", ""]


def _churn(entries: list[dict]) -> list[str]:
    lines = ["## Objects leaked", "", "| create/delete cycles | objects left | time to drain (s) | kinds checked |",
             "|---:|---:|---:|---|"]
    for e in entries:
        lines.append(f"| {e['cycles']} | {e['objects_leaked']} | {e['drain_seconds']} | {', '.join(e['kinds_checked'])} |")
    return lines + [""]


def _credentials(entries: list[dict]) -> list[str]:
    lines = ["## Credentials found", ""]
    for e in entries:
        lines.append(f"{e['found']} occurrences of the {e['keys_searched']} S3 test keys (access and secret key of a "
                     f"staging area the operator used against a refusing endpoint) in {e['operator_log_files']} operator "
                     f"log files ({e['operator_log_bytes']} bytes), {e['events']} events and the status and annotations "
                     f"of {e['status_objects']} switchyard objects." + (f" Where: {e['where']}" if e["where"] else ""))
    return lines + [""]


def last_recorded(data: dict) -> str:
    """When the newest row was recorded (each row is the latest run of its test; the JSON has every row's time)."""
    times = [e["recorded"] for entries in data.values() if isinstance(entries, list) for e in entries if "recorded" in e]
    if not times:
        return "not recorded"
    return f"{max(times).replace('T', ' ').replace('Z', '')} UTC, the newest row (commit not recorded)"


def render(data: dict) -> str:
    out = ["# Reliability", "",
           *about("faults injected into a running operator (kills, API server outages, drift, concurrent writers, "
                  "node loss and NotReady) and whether it reconverged; hostile specs, churn leaks, credentials in logs",
                  "`make bench-reliability` (`make soak` for the full sizes; both end with "
                  "`bench/reliability_report.py`)",
                  last_recorded(data)),
           "Measured by `e2e/test_faults.py` and `e2e/test_replan.py` (`make bench-reliability`; `make soak` for the "
           "full sizes) on a local control plane (kwokctl binary runtime: real kube-apiserver, "
           "etcd, controller-manager, scheduler; simulated nodes), generated by `bench/reliability_report.py` "
           "from `bench/results/reliability.json`. Timings are from the machine that ran them; each row is the "
           "latest run of its test (when it was recorded is in the JSON).", ""]
    if data.get("faults"):
        out += _faults(data["faults"])
    if data.get("bad_input"):
        out += _bad_input(data["bad_input"])
    if data.get("churn"):
        out += _churn(data["churn"])
    if data.get("credentials"):
        out += _credentials(data["credentials"])
    if data.get("findings"):
        out += ["## Findings (observed, not yet fixed)", ""] + [f"- {f['text']}" for f in data["findings"]] + [""]
    missing = [k for k in ("faults", "bad_input", "churn", "credentials") if not data.get(k)]
    if missing:
        out += [f"Not measured in this run: {', '.join(missing)}.", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default=str(RESULTS / "reliability.json"))
    parser.add_argument("--out", default=str(RESULTS / "reliability.md"))
    args = parser.parse_args(argv)
    source = pathlib.Path(args.json)
    if not source.exists():
        print(f"error: {source} not found; run the fault suite with SWITCHYARD_RELIABILITY_REPORT=1", file=sys.stderr)
        return 1
    pathlib.Path(args.out).write_text(render(json.loads(source.read_text())))
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
