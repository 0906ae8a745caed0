"""`switchyard run | plan | render | route | exporter | prepare-cache | copy-routing | prestage`."""

from __future__ import annotations

import argparse
import gc
import os
import socket
import sys


def _run(args: argparse.Namespace) -> int:
    from ..leader import Timing

    try:  # before anything starts: one line naming the flags, no traceback
        timing = Timing(lease_seconds=args.lease_seconds, renew_deadline=args.renew_deadline, retry=args.lease_retry)
    except ValueError:
        print(f"switchyard run: error: leader election needs 0 < --lease-retry ({args.lease_retry:g}) < "
              f"--renew-deadline ({args.renew_deadline:g}) < --lease-seconds ({args.lease_seconds}): a leader "
              f"must give up before its lease can expire", file=sys.stderr)
        return 2
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig
    os.environ.setdefault("SWITCHYARD_METRICS_PORT", str(args.metrics_port))
    import kopf

    from .. import handlers  # noqa: F401  (registers the handlers)

    kopf.configure(verbose=args.verbose)
    namespaces = args.namespace or []
    identity = args.identity or f"{socket.gethostname()}-{os.getpid()}"

    def operate(liveness: str | None) -> None:
        kopf.run(
            # No kopf peering: the Lease below decides who runs at all (docs/admin-guide.md, "Several replicas").
            standalone=True,
            # kopf names itself after the OS user by default; the image runs as UID 65532,
            # which has no passwd entry, and getpass would fail (seen on a real node).
            identity=f"switchyard@{identity}",
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=liveness,
        )

    if not args.lease_namespace:  # outside the chart, by default: one process, no election
        operate(f"http://0.0.0.0:{args.health_port}/healthz" if args.health_port else None)
        return 0
    from ..apply import Kube
    from ..leader import Elector, run_elected

    # The chart's downward API names this process's Pod, which is labelled switchyard.dev/leader.
    pod = (os.environ["POD_NAMESPACE"], os.environ["POD_NAME"]) \
        if os.environ.get("POD_NAMESPACE") and os.environ.get("POD_NAME") else None
    elector = Elector(Kube.from_environment(args.kubeconfig), args.lease_namespace, args.lease_name, identity, timing,
                      pod=pod)
    return run_elected(elector, operate, metrics_port=args.metrics_port, health_port=args.health_port)


def _render(args: argparse.Namespace) -> int:
    from .render import render_files
    from ..policy.settings import Settings

    try:
        docs = render_files(args.filename, args.topology, Settings.from_environment())
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import yaml

    from .plancli import write_stdout

    write_stdout(yaml.safe_dump_all(docs, sort_keys=False))  # `render | head` ends quietly, as `plan` does
    return 0


def _jitter(args: argparse.Namespace) -> int:
    import time

    from ..rampup import jitter_seconds

    delay = jitter_seconds(args.name, args.max_seconds)
    print(f"jitter: {args.name} waits {delay:.2f}s before starting", flush=True)
    time.sleep(delay)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchyard", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the operator")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    run.add_argument("-n", "--namespace", action="append", help="watch only this namespace (repeatable)")
    run.add_argument("--metrics-port", type=int, default=8080, help="Prometheus metrics port (0: off)")
    run.add_argument("--health-port", type=int, default=8081, help="liveness endpoint port (0: off)")
    run.add_argument("-v", "--verbose", action="store_true", help="log every handler step")
    run.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", ""),
                     help="elect a leader on a Lease in this namespace; only the holder reconciles "
                          "(default: $POD_NAMESPACE, which the chart sets; empty: no election)")
    run.add_argument("--lease-name", default="switchyard-leader", help="the Lease's name")
    run.add_argument("--identity", default=os.environ.get("POD_NAME", ""),
                     help="this candidate's holderIdentity (default: $POD_NAME, else host-pid)")
    run.add_argument("--lease-seconds", type=int, default=15, help="lease duration")
    run.add_argument("--renew-deadline", type=float, default=10.0,
                     help="a leader that has not renewed for this long exits")
    run.add_argument("--lease-retry", type=float, default=2.0, help="seconds between tries and renewals")
    run.set_defaults(func=_run)

    render = sub.add_parser("render", help="print the manifests a facility becomes on a topology, offline")
    render.add_argument("-f", "--filename", required=True, help="AnalysisFacility YAML")
    render.add_argument("--topology", required=True, help="topology file (e2e/topologies/*.yaml format)")
    render.set_defaults(func=_render)

    jitter = sub.add_parser("jitter", help="wait a delay fixed by a worker's name (init container of workers)")
    jitter.add_argument("--name", required=True, help="the pod's name")
    jitter.add_argument("--max-seconds", type=float, required=True, help="upper end of the delay")
    jitter.set_defaults(func=_jitter)

    try:
        from . import plancli
    except ImportError:
        plancli = None
    if plancli is not None:
        plancli.add_parser(sub)

    route = sub.add_parser("route", help="print the URL of the cache that should serve a root:// file (worker side)",
                           add_help=False)
    route.set_defaults(func=None)

    exporter = sub.add_parser("exporter", help="XRootD monitoring → Prometheus sidecar", add_help=False)
    exporter.set_defaults(func=None)

    prepare = sub.add_parser("prepare-cache", help="check a cache host's disks are mounted and make its directories "
                             "(init container of cache pods)", add_help=False)
    prepare.set_defaults(func=None)

    copy = sub.add_parser("copy-routing", help="copy the routing client into a directory for a worker's PYTHONPATH "
                          "(init container of workers)", add_help=False)
    copy.set_defaults(func=None)

    prestage = sub.add_parser("prestage", help="read a list of files through the caches the ring names, at a "
                              "share of the WAN (a CachePrestage's Job)", add_help=False)
    prestage.set_defaults(func=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    program = argv is None      # the process's own command line: it ends when this returns
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["route"]:  # before the parser: workers call it per file, without the planner's imports
        from ..routing import cli

        return cli.main(argv[1:])
    if argv[:1] == ["exporter"]:
        from ..observe import exporter

        return exporter.main(argv[1:])
    if argv[:1] == ["prepare-cache"]:  # in cache pods, before anything else runs: the standard library only
        from .. import cacheprepare

        return cacheprepare.main(argv[1:])
    if argv[:1] == ["copy-routing"]:  # in worker pods, before the worker: the standard library only
        from ..routing import bundle

        return bundle.main(argv[1:])
    if argv[:1] == ["prestage"]:  # in a CachePrestage's Job, in the cache image: no planner
        from ..prestage import runner

        return runner.main(argv[1:])
    if argv[:1] in (["plan"], ["render"]):
        return _offline(argv, ending=program)
    args = build_parser().parse_args(argv)
    return args.func(args)


def _offline(argv: list[str], ending: bool = False) -> int:
    """`plan` and `render`: one short process that builds a million objects at 20,000 nodes and keeps most of
    them to the end. The cyclic garbage collector only costs time there (~6% of `plan`'s CPU at that size;
    its peak memory is the same without it), and so does its last pass over the whole heap as the interpreter
    exits (~0.1 s): `ending` (the process ends when this returns) freezes the heap instead, which that pass
    skips. numpy's OpenBLAS, which the planner never calls, would start a thread pool at import (~45 ms of
    CPU). Whoever calls main() in-process with its own arguments gets its collector back as it was."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    collecting = gc.isenabled()
    gc.disable()
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    finally:
        if ending:
            gc.freeze()
        elif collecting:
            gc.enable()


if __name__ == "__main__":
    sys.exit(main())
