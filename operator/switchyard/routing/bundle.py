"""`switchyard copy-routing DEST`: the routing client as a directory any worker image can import.

A fleet's workers run the site's analysis image, which rarely has switchyard
(`ghcr.io/dask/dask`, coffea-casa's images). Their pod's `routing-copy` init
container runs this from the operator's own image: it writes into DEST (an
`emptyDir` the worker mounts and puts first on PYTHONPATH, see
builders/workerfleet.py) a `switchyard` package holding only

- `switchyard/routing/*.py`: the client, its hooks, the Dask preload, the CLI
  and the image check (routing/check.py);
- `switchyard/planner/hashing.py`: the rule file routing/rule.py loads by its
  path (the planner package itself is not copied: no `__init__.py`, no solver);
- `switchyard/__init__.py`: the package's version, and a `__path__` extended
  (pkgutil.extend_path) over every other `switchyard` directory on sys.path,
  so an image that has switchyard installed keeps the rest of it (its console
  script's `switchyard.cli`), while `switchyard.routing` is the operator's:
  the ring file a worker reads is written in the operator's format.

Standard library only, source files only (the worker's Python compiles them;
no bytecode of the operator's Python version), every file world-readable:
the worker runs as another user than the copy.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent  # the installed switchyard package
PACKAGE_INIT = '''"""switchyard's routing client, copied into this worker by the operator (switchyard copy-routing)."""

import pkgutil

__version__ = {version!r}
# Only switchyard.routing (and the rule file) is here; an installed switchyard keeps its other modules.
__path__ = pkgutil.extend_path(__path__, __name__)
'''


def files() -> list[tuple[Path, str]]:
    """(source, path inside DEST) of every file copied, in a fixed order."""
    routing = sorted((PACKAGE / "routing").glob("*.py"))
    return ([(p, f"switchyard/routing/{p.name}") for p in routing]
            + [(PACKAGE / "planner" / "hashing.py", "switchyard/planner/hashing.py")])


def copy_routing(dest: str | os.PathLike) -> list[str]:
    """Writes the routing package under `dest`; returns the paths written, relative to it."""
    from .. import __version__

    root = Path(dest)
    written = []
    for source, relative in files():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        written.append(relative)
    init = root / "switchyard" / "__init__.py"
    init.write_text(PACKAGE_INIT.format(version=__version__), encoding="utf-8")
    written.insert(0, "switchyard/__init__.py")
    for path in [root / "switchyard", *(p for p in root.joinpath("switchyard").rglob("*"))]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="switchyard copy-routing",
                                     description="copy switchyard's routing client into DEST (a worker's PYTHONPATH "
                                                 "directory): the routing-copy init container of workers")
    parser.add_argument("dest", metavar="DEST", help="the directory to write the switchyard package into")
    args = parser.parse_args(argv)
    try:
        written = copy_routing(args.dest)
    except OSError as error:
        print(f"switchyard copy-routing: {error}", file=sys.stderr)
        return 1
    print(f"copy-routing: {len(written)} files of switchyard.routing in {args.dest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
