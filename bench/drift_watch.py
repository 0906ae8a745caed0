"""The operator's drift check, live, on an emulated fabric's real exporters (bench/outside_readers_bench.py).

Every `every` seconds while a run's readers read, each cache host's exporter is
read from inside its node's namespace and fed through the functions the
operator's drift handler uses (handlers/drift.py: parse_readings / parse_flows,
record / record_flows, observed_gbps / observed_uplinks, predictions, assess), so
the verdict is the one a facility's Degraded condition would carry for those
bytes. The exporters count real bytes; the plan's predictions are model Gbps,
scaled by the fabric's Mbit/s per model Gbps to compare. The rules are the
operator's but for time: a fabric run lasts a minute or two, not the 5 minutes
of sustain a site uses.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Callable, Mapping

from switchyard.handlers.drift import expected_hosts
from switchyard.observe import drift

# A window and a staleness short enough for a run of a few 20 s windows. The sustain keeps the operator's
# proportion to the window (300 s to 60 s, here 40 s to 10 s): the readers' first window, which still holds
# the idle time before them, reads low for a window's length, and that start is not a drift.
RULES = drift.DriftRules(window_seconds=10, stale_seconds=10, sustain_seconds=40, clear_seconds=10)
_READ = ("import urllib.request,sys;sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=3).read().decode())")


def read_metrics(run: Callable, ns: str, url: str) -> str:
    """An exporter's /metrics text, read from inside a fabric namespace (empty when it does not answer)."""
    return run("ip", "netns", "exec", ns, sys.executable, "-c", _READ, url, check=False).stdout


class DriftWatch:
    """Reads the exporters every `every` s in a thread of its own, between start() and stop()."""

    def __init__(self, plan, plan_summary: Mapping, scale_mbit_per_gbps: float,
                 exporters: Mapping[str, tuple[str, str]], run: Callable, every: float = 2.0):
        """`plan` and `plan_summary` (status.plan) as the facility has them; `exporters`: cache node -> (its
        namespace, its /metrics URL), each labelled with the facility's pool name; `run` runs a command."""
        to_real = scale_mbit_per_gbps / 1000            # model Gbps -> the fabric's real Gbps
        self.predicted = {s: gbps * to_real for s, gbps in (drift.predictions(plan_summary) or {}).items()}
        self.cautions = drift.cautions(plan_summary)
        self.rules = dataclasses.replace(RULES, floor_gbps=RULES.floor_gbps * to_real)
        self.expected = expected_hosts(plan, {})
        self.exporters, self.run, self.every = exporters, run, every
        self.history: dict = {}
        self.flows: dict = {}
        self.memory: dict = {}
        self.assessment: drift.Assessment | None = None
        self.ever: set[drift.Subject] = set()            # every subject that drifted at some point of the run
        self.reads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> "DriftWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.check(time.monotonic())

    def check(self, now: float) -> None:
        readings, flows = [], []
        for ns, url in self.exporters.values():
            text = read_metrics(self.run, ns, url)
            readings += drift.parse_readings(text)
            flows += drift.parse_flows(text)
        keep = self.rules.window_seconds + self.rules.stale_seconds
        self.history = drift.record(self.history, readings, now, keep_seconds=keep)
        self.flows = drift.record_flows(self.flows, flows, now, keep_seconds=keep)
        observed = drift.observations(drift.observed_gbps(self.history, self.expected, now, self.rules),
                                      drift.observed_uplinks(self.flows, self.expected, now, self.rules))
        self.assessment = drift.assess(self.predicted, observed, self.memory, now, self.rules, self.cautions)
        self.memory = self.assessment.memory
        self.ever |= {v.subject for v in self.assessment.drifting}
        self.reads += 1

    def summary(self) -> dict:
        """What the run's check said: the subjects drifting at its end, any that drifted during it, its message."""
        a = self.assessment
        return {"reads": self.reads,
                "drifting_at_end": sorted(drift.name(v.subject) for v in a.drifting) if a else [],
                "drifted_during_run": sorted(drift.name(s) for s in self.ever),
                "message": a.message() if a else "",
                "verdicts": [v.describe() for v in a.verdicts if v.judged] if a else []}
