"""`switchyard route URL...`: print the URL of the cache that should serve each file.

For readers that are not Dask workers (a TaskVine task, a shell script):

    xrdcp "$(switchyard route root://origin.example.org//store/data/file.root)" /tmp/file.root

The routing comes from the worker's environment (SWITCHYARD_ROUTING,
SWITCHYARD_CACHE_ENDPOINT, SWITCHYARD_CACHE_RING_FILE or SWITCHYARD_CACHE_RING,
SWITCHYARD_HASH_RULE; the hot list beside the ring file, read as this reader,
SWITCHYARD_READER or HOSTNAME, reads it);
without it each URL is printed as it is. A reader outside Kubernetes (an
HTCondor job) needs only the pool's cache hosts' exporters, which serve the
ring and the hot list the pool's workers read:

    export SWITCHYARD_ROUTING_URL=http://10.0.1.5:9933,http://10.0.2.5:9933

`--all` prints every candidate, best first, one per line (the failover
order). A malformed environment is a one-line error and exit status 2.
"""

from __future__ import annotations

import argparse
import sys

from . import Router, RoutingError


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("urls", nargs="+", metavar="URL", help="root://host[:port]//path (other URLs are printed as they are)")
    parser.add_argument("--all", action="store_true",
                        help="print every candidate URL, best first (the failover order), one per line")
    return parser


def build_parser() -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(
        prog="switchyard route", description="Print the URL of the cache that should serve each file, "
        "from this worker's SWITCHYARD_* environment (SWITCHYARD_ROUTING_URL outside Kubernetes).", epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        router = Router.from_env()
    except RoutingError as error:
        print(f"switchyard route: {error}", file=sys.stderr)
        return 2
    for url in args.urls:
        print("\n".join(router.candidates(url)) if args.all else router.route(url))
    return 0


if __name__ == "__main__":
    sys.exit(main())
