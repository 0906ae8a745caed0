"""Placement: which switch runs which caches and workers, and the predicted load.

`plan` is the switch-aware planner (solver.py runs the stages of stages.py,
realise.py and stay.py: the placement model solved with HiGHS; a large
model's re-plan tries repair.py's incremental repair first). The
comparisons the benches and `switchyard plan` make are in baselines/ (the
default scheduler, a random placement, and the spine planner spread.py).
"""

from .model import FleetRequest, Placement, Plan, PoolRequest, Unsatisfiable, UplinkLoad
from .solver import plan

__all__ = ["FleetRequest", "Placement", "Plan", "PoolRequest", "Unsatisfiable", "UplinkLoad", "plan"]
