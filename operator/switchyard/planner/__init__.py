"""Placement: which switch runs which caches and workers, and the predicted load."""

from .model import FleetRequest, Placement, Plan, PoolRequest, Unsatisfiable, UplinkLoad
from .spread import plan

__all__ = ["FleetRequest", "Placement", "Plan", "PoolRequest", "Unsatisfiable", "UplinkLoad", "plan"]
