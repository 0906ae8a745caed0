"""The folders of operator/switchyard, what each holds and what each may import: the one source.

`make generate` writes the table in docs/architecture.md from RULES and
EXEMPTIONS; operator/tests/unit/test_import_rules.py checks every import of the
package against them (and fails on a module no row names, and on an exception
no longer needed).

A row's `units` are folders ("api/") or modules ("topology.py") of the package;
`may_import` names the folders and modules of switchyard it may import besides
its own row's ("builders/common.py": that module only; ANY: anything).
`note` says what else it uses, or why, for the reader; it is not checked here.
"""

from __future__ import annotations

from dataclasses import dataclass

ANY = "*"


@dataclass(frozen=True)
class Rule:
    units: tuple[str, ...]
    holds: str
    may_import: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class Exemption:
    """One import a row does not allow, kept on purpose."""

    importer: str  # a module of the package, as a path
    imported: str
    why: str


SMALL_PURE = ("conditions.py", "policy/hostpaths.py", "policy/imagepolicy.py", "observe/cachedisk.py",
              "observe/initreports.py", "observe/drift.py", "rampup.py")

RULES: tuple[Rule, ...] = (
    Rule(("api/",), "the models of the five kinds and of the plan contract; the condition and event reasons "
         "(`api/reasons.py`); how an uplink is scored (`api/uplinkscore.py`: its directions, utilisation, a "
         "plan's peak, the tolerances)", (), "pydantic, celpy"),
    Rule(("topology.py",), "nodes → the facility's switches, hosts and capacities", ("api/",)),
    Rule(("planner/",), "the placement model and its solver; `baselines/` the comparisons the benches and "
         "`switchyard plan` make", ("api/", "topology.py"), "HiGHS"),
    Rule(("builders/",), "pure manifest builders, one module per child kind",
         ("api/", "xrootd/", "observe/exporterspec.py", "prestage/__init__.py")),
    Rule(("xrootd/",), "the xrootd config renderer, the monitoring decoder", ("api/",)),
    Rule(("observe/__init__.py", "policy/__init__.py"), "`observe/`, the observing side: the cache exporter and "
         "its contract, the client map, the operator's metrics, disk and init-container reports, prediction drift; "
         "`policy/`, the admin's policy: allowed host paths and images, the operator's settings (each module has "
         "its row)", ()),
    Rule(("observe/clientmap.py",), "which switch a client address sits behind: the map the operator renders from "
         "the Nodes and the cache exporter reads", ()),
    Rule(("observe/exporterspec.py",), "the exporter's port, arguments and metric families",
         ("api/", "xrootd/", "observe/clientmap.py")),
    Rule(("desired/",), "desired state per kind: `desired_facility`, `desired_pool`, `fleet_intent` + "
         "`desired_fleet`, `desired_prestage`; `hotfiles.py`, a pool's hot files and their replica counts from the exporters' "
         "per-file read rates; `ringload.py`, its ring hosts' weight factors from their served-bytes counters",
         ("api/", "topology.py", "planner/", "builders/", "xrootd/", "observe/clientmap.py", *SMALL_PURE,
          "policy/settings.py", "routing/check.py", "observe/exporterspec.py", "prestage/__init__.py"),
         "`observe.exporterspec` for the names of the exporter's per-file gauge and counters"),
    Rule(SMALL_PURE, "small pure pieces (condition states, the admin's allowlists, disk reports, what init "
         "containers reported in their pods' status, prediction drift (observed served Gbps per switch and "
         "uplink loads per direction against the plan's, and the sustained `PredictionDrift` verdict), "
         "start-rate tokens)",
         ("api/", "xrootd/", "observe/exporterspec.py", "observe/clientmap.py", "cacheprepare.py")),
    Rule(("policy/settings.py",), "the operator's settings, read once from the environment at startup",
         ("policy/hostpaths.py", "policy/imagepolicy.py", "observe/drift.py")),
    Rule(("cli/render.py",), "`switchyard render`: the same `desired` functions on a topology file",
         ("api/", "topology.py", "builders/", "desired/", "policy/settings.py")),
    Rule(("apply.py",), "the only module that writes to the API server, over the connection `kubeconfig.py` finds",
         ("api/", "kubeconfig.py")),
    Rule(("leader.py",), "leader election on a `coordination.k8s.io/v1` Lease (client-go's record and rules): "
         "`switchyard run` waits for the Lease before it starts kopf, renews it, exits when it cannot, releases "
         "it on SIGTERM; labels its own Pod `switchyard.dev/leader=true|false`; the health and readiness "
         "endpoints in both roles", ("apply.py", "observe/metrics.py", "api/"),
         "`apply` for the Lease, Event and Pod-label verbs, `api` for its Event's reason"),
    Rule(("kubeconfig.py",), "where the API server is and how to authenticate (service account, kubeconfig "
         "token, certificate or exec plugin), with urllib3: no kubernetes client library in the operator", ()),
    Rule(("handlers/",), "kopf handlers: read → `desired` → converge → status",
         ("api/", "topology.py", "builders/", "desired/", *SMALL_PURE, "policy/settings.py", "apply.py",
          "observe/metrics.py", "s3/", "prestage/__init__.py"), "kopf"),
    Rule(("observe/metrics.py",), "the operator's metrics", ("observe/exporterspec.py",), "prometheus_client"),
    Rule(("observe/exporter.py", "observe/fileload.py"), "the cache sidecar's runtime (builders and "
         "`observe/metrics.py` never import it), which also serves the pool's routing to readers outside "
         "Kubernetes; `fileload.py`, its per-file read rates (pure: decaying, bounded)",
         ("observe/exporterspec.py", "observe/clientmap.py", "xrootd/", "routing/__init__.py"),
         "prometheus_client; `routing` for the paths and keys the readers' client fetches"),
    Rule(("s3/",), "the S3 client and the staging decisions (`s3/staging.py`: `assess`)",
         ("api/", "conditions.py"), "boto3"),
    Rule(("generate/",), "what `make generate` writes: CRDs, dashboards, chart values and schema, alert rules "
         "(`alerts.py`: the chart's PrometheusRule, the plain rules file and the runbooks), the metrics, "
         "reasons and API (`apidocs.py`) references, this table (`layout.py`); never imported by the operator",
         ("api/", "observe/metrics.py", "observe/drift.py")),
    Rule(("routing/",), "the worker side of routing: a file's cache from the worker's `SWITCHYARD_*` environment "
         "and the ring file its fleet's routing ConfigMap mounts (re-read when the kubelet refreshes it) "
         "(`switchyard route`), the fsspec/uproot hooks and the Dask preload that apply it; runs in worker "
         "images, copied there by the workers' `routing-copy` init container (`bundle.py`, `switchyard "
         "copy-routing`), and `check.py`, the `routing-check` init container's verdict on the worker's image",
         ("planner/hashing.py",), "the rule file is loaded alone, not the planner; never kopf or a kubernetes "
         "client"),
    Rule(("gateway/",), "a dask-gateway-server backend (`gateway/backend.py`, run inside the gateway process, "
         "never the operator): each gateway cluster is a root Secret owning a `WorkerFleet` with `facilityRef` "
         "and a gateway-speaking scheduler; its pure parts (`manifests.py`, `options.py`) build them",
         ("api/", "builders/common.py"), "`builders.common` for pod security and probes; dask-gateway-server; only `backend.py` uses a client (the gateway's own "
         "`kubernetes_asyncio`), never kopf or `apply.py`"),
    Rule(("cacheprepare.py",), "the cache pod's `prepare` init container (`switchyard prepare-cache`): the mount "
         "check on `/proc/self/mountinfo` (a data or meta path on the node's root filesystem is refused, "
         "`DiskNotMounted`) and xrootd's directories; its report's reader for `observe/cachedisk.py`", (),
         "the standard library only"),
    Rule(("prestage/__init__.py",), "the prestage runner's contract: its metrics port and families, its journal, "
         "its termination report (`Progress`), what the builders and the handler read of it", (),
         "the standard library only"),
    Rule(("prestage/runner.py", "prestage/pace.py"), "`switchyard prestage`, a CachePrestage's Job: each file read "
         "through the cache the ring rule names for it (the routing client's `Router`), at the WAN share's pace "
         "(`pace.py`: pure), its progress served as metrics",
         ("prestage/__init__.py", "routing/"), "prometheus_client; xrdcp and xrdfs as argument lists, no shell"),
    Rule(("cli/plandraw.py",), "`switchyard plan -o svg|png`: the facility as a picture",
         ("planner/", "topology.py", "api/uplinkscore.py"),
         "the uplink directions and when one is full, as the plan names them"),
    Rule(("cli/__init__.py", "cli/__main__.py", "cli/plancli.py"), "the command line (`run`, `plan`, `render`, "
         "`route`, `exporter`, `jitter`, `prepare-cache`, `copy-routing`, `prestage`)", (ANY,)),
)

EXEMPTIONS: tuple[Exemption, ...] = (
    Exemption("builders/workerfleet.py", "routing/__init__.py",
               "the workers read their ring file and `SWITCHYARD_*` environment with `routing/`, which is copied "
               "alone into worker images and so cannot import their names and line format from the operator's "
               "side; the builder writes what that reader reads (`HASH_RULE`, `RING_FILE_ENV`, `ring_entry`)"),
    Exemption("builders/prestage.py", "routing/__init__.py",
               "the prestage Job's runner reads the ring as a worker does (`routing.Router`), so its Job is given "
               "the same `SWITCHYARD_*` names a worker's pod is (`HASH_RULE`, `RING_FILE_ENV`, `RING_KEY`), for "
               "the reason builders/workerfleet.py imports them"),
    Exemption("builders/xcachepool.py", "observe/clientmap.py",
               "the pool's client-map ConfigMap is rendered in the format the exporter reads (`clientmap.render`, "
               "`KEY`); `observe/clientmap.py` is standard library only, the exporter's contract as `observe/exporterspec.py` is"),
)


def _name(unit: str) -> str:
    return unit.removesuffix(".py").removesuffix("/__init__").removesuffix("/").replace("/", ".")


def _cell(rule: Rule) -> str:
    if ANY in rule.may_import:
        ours = "anything"
    elif rule.may_import:
        ours = ", ".join(f"`{_name(u)}`" for u in rule.may_import)
    else:
        ours = "nothing of switchyard" + (" but itself" if any(u.endswith("/") for u in rule.units) else "")
    return f"{ours}; {rule.note}" if rule.note else ours


def _units(rule: Rule) -> str:
    return ", ".join(f"`{u}`" for u in rule.units)


def table_markdown() -> str:
    rows = [f"| {_units(r)} | {r.holds} | {_cell(r)} |" for r in RULES]
    exceptions = [f"- `{e.importer}` imports `{_name(e.imported)}`: {e.why}." for e in EXEMPTIONS]
    return ("| folder / module | holds | may import |\n|---|---|---|\n"
            + "\n".join(rows) + "\n\nImports the table does not allow, each kept for a reason "
            "(`operator/tests/unit/test_import_rules.py` fails on any other, and on one of these no longer "
            "made):\n\n" + "\n".join(exceptions) + "\n")


BEGIN = ("<!-- The table and its exceptions: generated by `make generate` from "
         "operator/switchyard/generate/layout.py; do not edit. -->\n")
END = "<!-- End of the generated table. -->\n"


def spliced(doc: str) -> str:
    """docs/architecture.md with its table between BEGIN and END replaced by the generated one."""
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + table_markdown() + END + tail
