"""What the real-node tests check on the machine and in the caches' exporters."""

from __future__ import annotations

import json
import pathlib
import subprocess

import realnodes
from support import wait_for

# The exporter's close-record kinds that count bytes served to clients.
SERVED_KINDS = ("hit", "miss", "bypass")


def host_state(extra_mounts: tuple[str, ...] = ()) -> dict:
    """What of the machine the real nodes must leave as they found it (`extra_mounts`: test disks' paths)."""
    run = pathlib.Path("/run/netns")
    netns = sorted(p.name for p in run.iterdir() if p.name.startswith(("syr-", "cni-"))) if run.exists() else []
    iptables = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    links = json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True, text=True).stdout or "[]")
    return {
        "sysctls": {k: pathlib.Path("/proc/sys", k).read_text().strip() for k in realnodes.KUBELET_SYSCTLS},
        "netns": netns,
        # Only what real nodes make (other harnesses, such as the fabric bench, may run beside them).
        "links": sorted(link["ifname"] for link in links if link["ifname"].startswith(("syr", "veth", "cni"))),
        "routes": [line for line in subprocess.run(["ip", "route"], capture_output=True, text=True).stdout.splitlines()
                   if line.startswith(("10.244.", "10.250.", "10.0.0."))],
        "iptables": "\n".join(line for line in iptables.splitlines() if not line.startswith(("#", ":"))),
        "mounts": sorted(line.split()[4] for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines()
                         if "switchyard-realnodes" in line or "/run/netns/syr-" in line or "/run/netns/cni-" in line
                         or any(path in line for path in extra_mounts)),
    }


def metric(text: str, name: str) -> float:
    """The sum of a metric's samples (every label set) in a Prometheus text exposition."""
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name) and not line.startswith("#")]
    return sum(values)


def exporter_metrics(cluster, cache: dict, done, what: str = "the cache exporter's counters") -> str:
    """The metrics of the exporter beside xrootd in pod `cache`, once `done(text)` holds (printed for the record)."""
    scraped = {}
    path = f"/api/v1/namespaces/{cache['metadata']['namespace']}/pods/{cache['metadata']['name']}:9933/proxy/metrics"

    def seen() -> bool:
        scraped["text"] = cluster.kubectl("get", "--raw", path)
        return done(scraped["text"])
    try:
        wait_for(seen, timeout=120, interval=2, what=what)
    finally:
        print("\n".join(line for line in scraped.get("text", "").splitlines() if line.startswith("switchyard_xcache")))
    return scraped["text"]
