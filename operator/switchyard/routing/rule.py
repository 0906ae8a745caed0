"""The planner's rendezvous rule (switchyard/planner/hashing.py), for clients.

A reader must pick its cache with exactly the rule the planner counted on, so
the rule lives in one file and this module loads that file. It loads it on
its own rather than as `switchyard.planner.hashing`: importing the planner
package would load the solver (scipy, HiGHS) into every worker and every
`switchyard route` call, for three standard-library functions. When the
planner is already imported, its module is used as it is.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType

_PLANNER_MODULE = "switchyard.planner.hashing"
_STANDALONE = "switchyard.routing._planner_hashing"
_SOURCE = Path(__file__).resolve().parent.parent / "planner" / "hashing.py"


# The standalone module once it has run to the end. sys.modules holds it from before it runs (its own
# code may look itself up there), so a thread that found it there could call a function not yet defined
# (the likely end of the 1-7 of 8 reader threads the real-node fabric bench lost on a worker that had
# not routed before they all started at once).
_loaded: ModuleType | None = None
_lock = threading.Lock()


def hashing() -> ModuleType:
    """The module of planner/hashing.py (`order`, `home`, `score`, `unit`); safe to call from many threads."""
    global _loaded
    if _loaded is not None:
        return _loaded
    with _lock:
        if _loaded is None:
            _loaded = _load()
    return _loaded


def _load() -> ModuleType:
    for name in (_PLANNER_MODULE, _STANDALONE):
        if name in sys.modules:
            return sys.modules[name]
    spec = importlib.util.spec_from_file_location(_STANDALONE, _SOURCE)
    if spec is None or spec.loader is None:  # pragma: no cover - an install without the planner's source
        import switchyard.planner.hashing as module

        return module
    module = importlib.util.module_from_spec(spec)
    sys.modules[_STANDALONE] = module
    spec.loader.exec_module(module)
    return module
