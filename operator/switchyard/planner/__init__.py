"""Placement: which switch runs which caches and workers, and the predicted load.

`plan` is the switch-aware planner (solver.py: the placement model solved with
HiGHS). `spread.plan` and the functions in baselines.py are the comparisons.
"""

from .model import FleetRequest, Placement, Plan, PoolRequest, Unsatisfiable, UplinkLoad
from .solver import plan

__all__ = ["FleetRequest", "Placement", "Plan", "PoolRequest", "Unsatisfiable", "UplinkLoad", "plan"]
