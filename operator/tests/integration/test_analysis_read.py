"""A real analysis read: NanoAOD-like files opened by their origin URL, every byte from the planned cache.

The facility here: two switches, sw1 with one cache host (127.0.0.2) and sw2
with two (127.0.0.3, 127.0.0.4), in front of one real XRootD origin. Each
cache runs the config switchyard renders, with its exporter run as its pod
runs the sidecar. A real Dask scheduler and four real Dask workers, each
started with the command, args and env of a pod of the Deployments build_fleet
makes for a fleet planned with a local and a ring reader on each switch. The
analyst's task is plain uproot/awkward/numpy on origin URLs.

The proof is each cache host's exporter: its /metrics (scraped over HTTP) count
the bytes the host sent to clients. Files are read one at a time; for each,
the host the plan names must have sent at least the compressed bytes of the
branches read, and every other host less than NOT_SERVED: nothing connects to
a cache that serves nothing, and a misrouted read of any of these files sends
its branches' baskets (hundreds of KB). The origin's own counter shows each file
fetched once per cache that serves it.
"""

from __future__ import annotations

import time

import awkward as ak
import numpy as np
import pytest
import uproot
from routing_rig import (
    NOT_SERVED, KubeletVolume, RingCache, dask_scheduler, exporter_sidecars, publish_config, running_ring,
    start_pod_worker, stop_all,
)
from xrootd_fixtures import wait_until

from switchyard.api import WorkerFleetSpec
from switchyard.api.plans import FleetPlan
from switchyard.builders.workerfleet import build_fleet, build_routing_config
from switchyard.routing import RING_RECHECK_SECONDS
from switchyard.builders.xcachepool import endpoint
from switchyard.planner import hashing

pytestmark = pytest.mark.integration

POOL, NAMESPACE, FLEET = "af-xc", "analysis", "higgs"
SWITCH_OF = {"127.0.0.2": "sw1", "127.0.0.3": "sw2", "127.0.0.4": "sw2"}
POOL_PORT = 1094
FILES = 4
EVENTS = 60_000  # ~2.7 MB a file; the task reads ~0.8 MB of it (two muon branches)
READ_BRANCHES = ["Muon_pt", "Muon_eta"]
PT_BINS = np.linspace(0.0, 200.0, 41)
# The origin's replies to a cache's login, open and stat; far below one block (256 KiB).
ORIGIN_NOISE_PER_FILE = 16 * 1024


def analysis_task():
    """The analyst's task, defined as in a notebook (so Dask ships it by value, not by module name)."""

    def muon_pt_histogram(url: str) -> dict:
        """Good muons' pt, histogrammed. The file is named by its origin URL; nothing here knows of caches."""
        counts = np.zeros(len(PT_BINS) - 1, dtype=np.int64)
        events = dimuon = 0
        for chunk in uproot.iterate({url: "Events"}, READ_BRANCHES, step_size=20_000):
            good = (chunk.Muon_pt > 10) & (abs(chunk.Muon_eta) < 2.4)
            pt = chunk.Muon_pt[good]
            counts += np.histogram(ak.to_numpy(ak.flatten(pt)), PT_BINS)[0]
            events += len(chunk)
            dimuon += int(ak.sum(ak.num(pt) >= 2))
        return {"pt": counts.tolist(), "events": events, "dimuon": dimuon}

    return muon_pt_histogram


def write_nanoaod(path, seed: int) -> int:
    """A NanoAOD-like Events tree (nMuon, Muon_pt/eta/phi, nElectron, Electron_*, MET_pt, ...) as a TTree.

    Returns the compressed bytes of the branches the task reads: the least a reader must be sent."""
    rng = np.random.default_rng(seed)

    def collection(mean: float) -> ak.Array:
        counts = rng.poisson(mean, EVENTS)
        n = int(counts.sum())
        return ak.zip({"pt": ak.unflatten((rng.exponential(20.0, n) + 3.0).astype(np.float32), counts),
                       "eta": ak.unflatten(rng.normal(0.0, 1.4, n).astype(np.float32), counts),
                       "phi": ak.unflatten(rng.uniform(-np.pi, np.pi, n).astype(np.float32), counts)})

    data = {"run": np.full(EVENTS, 362_000 + seed, np.uint32), "event": np.arange(EVENTS, dtype=np.uint64),
            "Muon": collection(1.5), "Electron": collection(1.2),
            "MET_pt": rng.exponential(30.0, EVENTS).astype(np.float32)}
    with uproot.recreate(path) as out:
        tree = out.mktree("Events", {k: v.type if isinstance(v, ak.Array) else v.dtype for k, v in data.items()})
        for start in range(0, EVENTS, 20_000):  # several baskets per branch, as a real file has
            tree.extend({k: v[start:start + 20_000] for k, v in data.items()})
    with uproot.open(path) as f:
        assert {"nMuon", "Muon_phi", "nElectron", "Electron_pt"} <= set(f["Events"].keys())
        return sum(f["Events"][b].compressed_bytes for b in READ_BRANCHES)


class Ledger:
    """Bytes each live cache host sent to clients, per its exporter, between calls of `since_last`."""

    def __init__(self, caches: list[RingCache]) -> None:
        self.caches = list(caches)
        self.last = self._now()

    def _now(self) -> dict[str, int]:
        """Every live host's count of bytes sent before this call, waiting on all exporters at once."""
        moment = time.time()
        marks = {c.name: c.meter.mark(moment) for c in self.caches}
        values = {}

        def all_reached() -> bool:
            values.update((c.name, c.meter.reached(marks[c.name])) for c in self.caches if values.get(c.name) is None)
            return all(values.values())

        wait_until(all_reached, timeout=60, interval=0.5, what="summaries from every cache after the read")
        return {name: int(v["switchyard_xcache_client_bytes_total"]) for name, v in values.items()}

    def since_last(self) -> dict[str, int]:
        now = self._now()
        delta = {name: now[name] - self.last[name] for name in now}
        self.last = now
        return delta

    def drop(self, cache: RingCache) -> None:
        self.caches.remove(cache)
        del self.last[cache.name]


@pytest.fixture
def facility(xrd_base, xrootd_account):
    """The origin with the files, the three caches (exporters running), and what maps pod addresses here."""
    sidecars = exporter_sidecars(xrd_base, POOL, SWITCH_OF)
    with running_ring(xrd_base, xrootd_account, len(SWITCH_OF), meter=sidecars) as (origin, caches):
        assert [c.name for c in caches] == list(SWITCH_OF)
        files = {}
        for i in range(FILES):
            lfn = f"/store/mc/Run3Summer23NanoAODv12/GluGluHToZZto4L/NANOAODSIM/{i:04d}.root"
            path = origin.root / lfn.lstrip("/")
            for parent in reversed(path.relative_to(origin.root).parents[:-1]):
                xrootd_account.make_dir(origin.root / parent)
            needed = write_nanoaod(path, seed=i)
            files[lfn] = {"path": path, "needed": needed, "size": xrootd_account.own(path).stat().st_size}
        # What a pod is told → where it listens here: a node's cache port (host network: the
        # pool's port on every host) and each switch's Service (here: the switch's first host;
        # kube-proxy would spread connections over the switch's hosts, all on that switch).
        addresses = {f"{c.name}:{POOL_PORT}": c.address for c in caches}
        for switch in ("sw1", "sw2"):
            first = next(c for c in caches if SWITCH_OF[c.name] == switch)
            addresses[endpoint(POOL, NAMESPACE, POOL_PORT, switch)] = first.address
        yield origin, caches, files, addresses


def fleet(caches: list[RingCache]) -> tuple[dict[str, dict], FleetPlan, dict]:
    """The Deployments of a fleet planned with one local and one ring reader on each switch, and its
    routing ConfigMap (each cache host reached at its InternalIP: here the host's own loopback name)."""
    spec = WorkerFleetSpec.model_validate({
        "facilityRef": {"name": "af"}, "replicas": 4, "cores": 1, "memoryGiB": 1,
        "dask": {"schedulerAddress": f"tcp://{FLEET}-scheduler.{NAMESPACE}.svc:8786"}})
    plan = FleetPlan(facility="af", workers={"sw1": 2, "sw2": 2}, hashed={"sw1": 1, "sw2": 1}, pool=POOL,
                     pool_port=POOL_PORT, cache_switches=["sw1", "sw2"], routing={"sw1": "hashed", "sw2": "hashed"},
                     cache_ring={c.name: 1.0 for c in caches})
    return ({d["metadata"]["name"]: d for d in build_fleet(FLEET, NAMESPACE, spec, plan, helper_image="h:1")}, plan,
            build_routing_config(FLEET, plan, {c.name: c.name for c in caches}))


class Analysis:
    """The fleet's workers on a real scheduler, the task, and the checks of who served each read."""

    def __init__(self, client, scheduler: str, facility, logs) -> None:
        self.client, self.scheduler, self.logs = client, scheduler, logs
        self.origin, self.caches, self.files, self.addresses = facility
        self.task = analysis_task()
        self.local = {lfn: self.task(str(f["path"])) for lfn, f in self.files.items()}  # the same task, on the files
        self.urls = {lfn: f"root://127.0.0.1:{self.origin.daemon.port}/{lfn}" for lfn in self.files}
        self.pods: dict[str, object] = {}  # pod name → its worker process
        self.address: dict[str, str] = {}  # Deployment name → its worker's address
        self.fetched: dict[str, set[str]] = {c.name: set() for c in self.caches}  # the files each cache fetched
        self.ledger: Ledger | None = None
        self.origin_sent = self.origin_counted = 0
        self.routing = KubeletVolume(logs.parent / "routing")  # the fleet's ConfigMap, as the kubelet mounts it

    def publish(self, config: dict) -> None:
        publish_config(self.routing, config, self.addresses)

    def start(self, deployments: dict[str, dict], generation: int = 0) -> None:
        """One worker per Deployment, as its pod `<deployment>-<generation>` runs; returns once all joined."""
        names = {f"{name}-{generation}": name for name in deployments}
        for pod, name in names.items():
            self.pods[pod] = start_pod_worker(deployments[name], self.scheduler, self.addresses, self.logs,
                                              self.logs.parent, pod_name=pod, volumes={"routing": self.routing.root})

        def joined() -> bool:
            info = self.client.scheduler_info()["workers"]
            found = {names[w["name"]]: a for a, w in info.items() if w["name"] in names}
            self.address.update(found)
            return len(found) == len(names)

        wait_until(joined, timeout=300, what="the workers to join")
        if self.ledger is None:
            self.ledger = Ledger(self.caches)
            self.origin_sent = self.origin.bytes_sent_now()

    def read(self, lfn: str, worker: str, served_by: str) -> dict[str, int]:
        """One file read by the task on one worker: the same result as on the local file, every
        byte from `served_by` (per the exporters); returns the bytes each host sent."""
        got = self.client.submit(self.task, self.urls[lfn], workers=[self.address[worker]], pure=False).result(300)
        assert got == self.local[lfn], f"{lfn} on {worker}"
        sent = self.ledger.since_last()
        assert sent[served_by] >= self.files[lfn]["needed"], f"{lfn} on {worker}: {served_by} sent too little: {sent}"
        assert all(v < NOT_SERVED for name, v in sent.items() if name != served_by), \
            f"{lfn} on {worker}: a host other than {served_by} served it: {sent}"
        return sent

    def pass_over(self, expected: dict[str, str], readers: list[str]) -> dict[str, int]:
        """Each file read once, by the readers in turn, from the host `expected` names; then the
        origin's check. Returns the bytes each host sent in all."""
        cold, total = [], dict.fromkeys(self.ledger.last, 0)
        for i, lfn in enumerate(self.files):
            for name, n in self.read(lfn, readers[i % len(readers)], expected[lfn]).items():
                total[name] += n
            if lfn not in self.fetched[expected[lfn]]:
                cold.append(lfn)
                self.fetched[expected[lfn]].add(lfn)
        self.origin_fetched(cold)
        return total

    def origin_fetched(self, cold: list[str]) -> None:
        """Per the origin's own counter: it sent each file of `cold` once (a cache fetches the
        file it serves first; its prefetch may take the whole file) and nothing for re-reads."""
        now = self.origin.bytes_sent_now()
        sent, self.origin_sent = now - self.origin_sent, now
        self.origin_counted += sent
        least = sum(self.files[lfn]["needed"] for lfn in cold)
        most = sum(self.files[lfn]["size"] + ORIGIN_NOISE_PER_FILE for lfn in cold) + ORIGIN_NOISE_PER_FILE
        assert least <= sent <= most, f"origin sent {sent} for {len(cold)} cold (cache, file) pairs: {cold}"

    def exporter_origin_bytes(self, cache: RingCache) -> int:
        """What the cache's exporter counts as fetched from the origin (pfc g-stream, at file close):
        at least what its reads needed, at most each file it fetched once."""
        fetched = self.fetched[cache.name]
        least = sum(self.files[lfn]["needed"] for lfn in fetched)
        count = lambda: cache.meter.scrape()["switchyard_xcache_origin_bytes_total"]  # noqa: E731
        wait_until(lambda: count() >= least, timeout=60, what=f"{cache.name}'s file closes")
        assert count() <= sum(self.files[lfn]["size"] for lfn in fetched), (cache.name, count(), fetched)
        return int(count())


def test_analysis_reads_by_origin_url_every_byte_from_the_planned_cache(facility, xrd_base):
    from distributed import Client

    origin, caches, files, addresses = facility
    by_name = {c.name: c for c in caches}
    deployments, plan, config = fleet(caches)
    assert sorted(deployments) == [f"{FLEET}-{s}-{g}" for s in ("sw1", "sw2") for g in ("local", "ring")]
    home = {lfn: hashing.home(lfn, plan.cache_ring) for lfn in files}
    assert set(home.values()) == set(SWITCH_OF), f"each cache should be home to a file: {home}"
    lost = by_name["127.0.0.4"]  # the sw2 host that is not its Service's first: local readers keep theirs

    logs = xrd_base / "dask.log"
    with dask_scheduler(logs) as scheduler, Client(scheduler, timeout=60) as client:
        run = Analysis(client, scheduler, facility, logs)
        try:
            run.publish(config)
            run.start(deployments)

            # local routing: every file from the reader's own switch's cache
            switch_cache = {s: addresses[endpoint(POOL, NAMESPACE, POOL_PORT, s)].split(":")[0] for s in ("sw1", "sw2")}
            readers = [f"{FLEET}-sw1-local", f"{FLEET}-sw2-local"]
            run.pass_over({lfn: switch_cache[("sw1", "sw2")[i % 2]] for i, lfn in enumerate(files)}, readers)

            # hashed routing: each file from the cache the rule names, whichever switch reads it
            # (each file's reader is on the other switch than its local reader was)
            run.pass_over(home, [f"{FLEET}-sw2-ring", f"{FLEET}-sw1-ring"])

            # A cache goes (its node cordoned, its pod deleted): the operator republishes the ring
            # without it. That changes the fleet's routing ConfigMap and no Deployment: the running
            # workers re-read the file and go on. While the cache still runs, it serves nothing once
            # the ring is re-read (the ledger still counts it); then it stops. Its files move to the
            # rule's next choice; no other file moves.
            survivors = [c for c in caches if c is not lost]
            deployments_after, plan_after, config_after = fleet(survivors)
            assert deployments_after == deployments and config_after != config
            run.publish(config_after)
            time.sleep(RING_RECHECK_SECONDS + 0.5)
            after = {lfn: hashing.home(lfn, plan_after.cache_ring) for lfn in files}
            moved = {lfn for lfn in files if after[lfn] != home[lfn]}
            assert moved == {lfn for lfn, h in home.items() if h == lost.name} and moved
            assert all(after[lfn] == hashing.order(lfn, plan.cache_ring)[1] for lfn in moved)
            ring_names = [f"{FLEET}-sw1-ring", f"{FLEET}-sw2-ring"]
            run.pass_over(after, ring_names)
            lost.cache.daemon.stop()
            lost.meter.close()  # the pod goes, sidecar and all
            run.ledger.drop(lost)
            one_by_one = run.pass_over(after, ring_names)
            assert all(process.poll() is None for process in run.pods.values())  # no worker restarted

            # The whole analysis at once, spread over the ring readers: the sum equals the same
            # computation on the local files; each host sends what it sent for its files one by
            # one, and the origin nothing (every file is on its cache).
            ring_readers = [run.address[n] for n in ring_names]
            results = client.gather(client.map(run.task, list(run.urls.values()), pure=False, workers=ring_readers))
            assert np.sum([r["pt"] for r in results], axis=0).tolist() == \
                np.sum([r["pt"] for r in run.local.values()], axis=0).tolist()
            assert sum(r["events"] for r in results) == FILES * EVENTS
            sent = run.ledger.since_last()
            assert all(abs(sent[name] - one_by_one[name]) < NOT_SERVED for name in sent), (sent, one_by_one)
            run.origin_fetched([])

            # Each exporter's origin bytes: what its files needed at least, each file once at most.
            # (A cache reports a file when it closes it: fsspec-xrootd keeps read handles open for
            # 30-60 s, so the workers go first; their connections close and with them the files.)
            stop_all(list(run.pods.values()))
            for c in survivors:
                run.exporter_origin_bytes(c)
        finally:
            stop_all(list(run.pods.values()))
            print(logs.read_text()[-3000:] if logs.exists() else "")
