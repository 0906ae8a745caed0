"""Facility objects the e2e tests apply (valid ones, and ways to break them)."""

from __future__ import annotations

import copy


def facility(name: str = "af", workers: int = 6) -> dict:
    return {
        "apiVersion": "switchyard.dev/v1alpha1",
        "kind": "AnalysisFacility",
        "metadata": {"name": name},
        "spec": {
            "targetGbps": 100,
            "routing": "local",
            "network": {"switches": [{"name": "rack-a", "uplinkGbps": 80}, {"name": "rack-b", "uplinkGbps": 80},
                                     {"name": "rack-c", "uplinkGbps": 40}]},
            "cachePools": [{
                "name": "xcache",
                "serveGbps": 45,
                "origin": {"host": "origin.example.org"},
                "storage": {"dataPaths": ["/mnt/nvme0", "/mnt/nvme1"]},
                "resources": {"cpu": "2", "memory": "12Gi"},
            }],
            "fleets": [{"name": "dask", "replicas": workers, "cores": 2, "memoryGiB": 4, "readGbps": 1,
                        "dask": {"schedulerAddress": "tcp://scheduler.example.org:8786"}}],
        },
    }


def broken(mutate) -> dict:
    obj = copy.deepcopy(facility("bad"))
    mutate(obj["spec"])
    return obj


def _set(path: list, value):
    def mutate(spec):
        target = spec
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return mutate


# (description, object, text the API server's error must contain)
INVALID = [
    ("wrong type", broken(_set(["targetGbps"], "fast")), "spec.targetGbps"),
    ("negative uplink", broken(_set(["network", "switches", 0, "uplinkGbps"], -5)), "spec.network.switches[0].uplinkGbps"),
    ("water marks crossed", broken(_set(["cachePools", 0, "pfc"], {"lowWatermark": 0.97, "highWatermark": 0.9})),
     "spec.cachePools[0].pfc.lowWatermark"),
    ("two engines in one fleet", broken(_set(["fleets", 0, "taskvine"], {"managerHost": "manager.example.org"})),
     "spec.fleets[0].dask"),
    ("duplicate switches", broken(_set(["network", "switches"], [{"name": "rack-a", "uplinkGbps": 80},
                                                                 {"name": "rack-a", "uplinkGbps": 40}])),
     "spec.network.switches[1]"),
    ("unknown field", broken(_set(["network", "bogus"], 1)), "spec.network.bogus"),
    ("unsupported routing", broken(_set(["routing"], "nearest")), "spec.routing"),
    ("block size not a multiple of 4 KiB", broken(_set(["cachePools", 0, "pfc"], {"blockSizeKiB": 1022})),
     "spec.cachePools[0].pfc.blockSizeKiB"),
    ("fleet names a missing pool", broken(_set(["fleets", 0, "pool"], "nope")), "spec.fleets"),
    ("no switches", broken(_set(["network", "switches"], [])), "spec.network.switches"),
    ("shell in an image name", broken(_set(["cachePools", 0, "image"], "xcache; rm -rf /")), "spec.cachePools[0].image"),
    ("no origin host in fixed mode", broken(_set(["cachePools", 0, "origin"], {"mode": "fixed"})),
     "spec.cachePools[0].origin.host"),
]
