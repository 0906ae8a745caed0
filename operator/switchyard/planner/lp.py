"""A small sparse (mixed-integer) linear program builder solved by HiGHS (highspy).

The solver states its model once as variables and rows, then solves it several
times with different objectives (the lexicographic stages) and extra rows that
pin what earlier stages achieved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

import highspy
import numpy as np

INF = float("inf")
# Branch-and-bound nodes per solve: a deterministic cap (a time limit would
# make the plan depend on the machine's speed). A node's LP grows with the
# model, so large models get fewer: WORK_LIMIT / (rows + columns), at least
# MIN_NODES. At the limit the best point found is taken (Solution.optimal False).
NODE_LIMIT = 5000
WORK_LIMIT = 5_000_000
MIN_NODES = 50


def node_budget(size: int) -> int:
    """Branch-and-bound nodes a MILP of `size` rows and columns may use (deterministic)."""
    return max(MIN_NODES, min(NODE_LIMIT, WORK_LIMIT // max(1, size)))


class SolveError(RuntimeError):
    """HiGHS found no solution where one must exist (a modelling bug or numerical trouble)."""


@dataclass(frozen=True)
class Solution:
    x: np.ndarray
    objective: float
    optimal: bool          # proven within the gap (False: node limit reached with a feasible point)

    def value(self, terms: Mapping[int, float]) -> float:
        return float(sum(c * self.x[i] for i, c in terms.items()))


def _as_solution(x) -> highspy.HighsSolution:
    sol = highspy.HighsSolution()
    sol.col_value = list(map(float, x))
    sol.value_valid = True
    return sol


class Infeasible(Exception):
    pass


class LinearModel:
    """Variables and rows, solved by one HiGHS instance that is kept between solves.

    Each solve passes HiGHS only what changed since the last (rows added or
    rolled back, bounds, integrality, objective), so a later LP stage starts
    from the previous stage's basis. Variables are only added before the
    first solve.
    """

    def __init__(self) -> None:
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.integer: list[bool] = []
        self._cols: list[int] = []
        self._vals: list[float] = []
        self._row_start: list[int] = []     # index into _cols/_vals where each row's entries start
        self.row_lb: list[float] = []
        self.row_ub: list[float] = []
        self._highs: highspy.Highs | None = None
        self._synced = 0                    # rows HiGHS holds
        self._solved = False                # whether HiGHS holds a basis from an earlier solve

    @property
    def size(self) -> int:
        return len(self.lb)

    def var(self, lb: float = 0.0, ub: float = INF, integer: bool = False) -> int:
        if self._highs is not None:
            raise RuntimeError("variables are added before the first solve")
        self.lb.append(lb)
        self.ub.append(ub)
        self.integer.append(integer)
        return len(self.lb) - 1

    def row(self, terms: Iterable[tuple[int, float]] | dict[int, float], lb: float = -INF, ub: float = INF) -> int:
        items = terms.items() if isinstance(terms, dict) else terms
        self._row_start.append(len(self._cols))
        kept = [(col, coef) for col, coef in items if coef]
        if kept:    # a model at 20,000 nodes has 17,000 rows: one pass, two extends
            cols, vals = zip(*kept)
            self._cols.extend(cols)
            self._vals.extend(vals)
        self.row_lb.append(lb)
        self.row_ub.append(ub)
        return len(self.row_lb) - 1

    def mark(self) -> int:
        """A point to roll rows back to (stage pins are temporary)."""
        return len(self.row_lb)

    def rollback(self, mark: int) -> None:
        if mark >= len(self.row_lb):
            return
        cut = self._row_start[mark]
        del self._cols[cut:], self._vals[cut:], self._row_start[mark:], self.row_lb[mark:], self.row_ub[mark:]

    def solve(self, objective: Mapping[int, float], maximise: bool = False, relax: bool = False,
              gap: float = 1e-4, abs_gap: float = 1e-6, start: "Solution | None" = None,
              iterations: int | None = None, nodes: int | None = None) -> Solution:
        n = self.size
        cost = np.zeros(n)
        for i, coef in objective.items():
            cost[i] += coef
        h = self._sync()
        h.changeColsCost(n, np.arange(n, dtype=np.int32), cost)
        h.changeColsBounds(n, np.arange(n, dtype=np.int32), np.array(self.lb), np.array(self.ub))
        # HighsVarType is a uint8 in HiGHS (kContinuous 0, kInteger 1): an array of those bytes is what a list
        # of the enum's objects becomes, built without 29,000 objects at 20,000 nodes, eight times a plan
        integrality = np.zeros(n, dtype=np.uint8) if relax else np.array(self.integer, dtype=np.uint8)
        h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), integrality)
        h.changeObjectiveSense(highspy.ObjSense.kMaximize if maximise else highspy.ObjSense.kMinimize)
        budget = node_budget(n + len(self.row_lb))
        for option, value in (("mip_rel_gap", gap), ("mip_abs_gap", abs_gap),
                              ("mip_max_nodes", budget if nodes is None else min(nodes, budget))):
            h.setOptionValue(option, value)
        if start is not None and not relax:
            h.setSolution(_as_solution(start.x))    # a feasible point to start branch and bound from
        # iterations: a cap on an LP's simplex iterations; the point reached is returned (feasible)
        h.setOptionValue("simplex_iteration_limit", iterations if iterations is not None and relax else 2**31 - 1)
        # The first LP starts from nothing: dual simplex without presolve reaches its basis in half the
        # time at 20,000 nodes. Later solves change the objective: primal simplex from that basis.
        first = relax and not self._solved
        h.setOptionValue("simplex_strategy", 1 if first else 4)
        h.setOptionValue("presolve", "off" if first else "choose")
        self._solved = True
        h.run()
        status = h.getModelStatus()
        if status in (highspy.HighsModelStatus.kInfeasible, highspy.HighsModelStatus.kUnboundedOrInfeasible):
            raise Infeasible(h.modelStatusToString(status))
        info = h.getInfo()
        if info.primal_solution_status != 2 and status == highspy.HighsModelStatus.kIterationLimit:
            return self.solve(objective, maximise, relax, gap, abs_gap, start, nodes=nodes)     # capped before feasible
        if info.primal_solution_status != 2:     # 2: a feasible point
            raise SolveError(f"HiGHS: {h.modelStatusToString(status)}")
        x = np.asarray(h.getSolution().col_value)
        return Solution(x=x, objective=float(info.objective_function_value),
                        optimal=status == highspy.HighsModelStatus.kOptimal)

    def _sync(self) -> highspy.Highs:
        """Create the HiGHS instance, or bring its rows in line with ours."""
        rows = len(self.row_lb)
        if self._highs is None:
            h = self._highs = highspy.Highs()
            # primal simplex: each stage changes the objective, so the last basis stays primal feasible
            # No RINS/RENS sub-MIPs and no restarts: on the cache-count MILPs they took most of the time
            # and found nothing the tree search did not.
            for option, value in (("output_flag", False), ("mip_max_nodes", NODE_LIMIT), ("threads", 1),
                                  ("random_seed", 0), ("simplex_strategy", 4), ("mip_heuristic_run_rins", False),
                                  ("mip_heuristic_run_rens", False), ("mip_allow_restart", False)):
                h.setOptionValue(option, value)
            h.addVars(self.size, np.array(self.lb), np.array(self.ub))
            self._synced = 0
        h = self._highs
        if self._synced > rows:
            h.deleteRows(self._synced - rows, np.arange(rows, self._synced, dtype=np.int32))
            self._synced = rows
        if self._synced < rows:
            first = self._row_start[self._synced]
            starts = np.array(self._row_start[self._synced:], dtype=np.int32) - first
            h.addRows(rows - self._synced, np.array(self.row_lb[self._synced:]), np.array(self.row_ub[self._synced:]),
                      len(self._cols) - first, starts, np.array(self._cols[first:], dtype=np.int32),
                      np.array(self._vals[first:]))
            self._synced = rows
        return h
