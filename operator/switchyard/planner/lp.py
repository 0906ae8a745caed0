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
from scipy.sparse import csc_array

INF = float("inf")
# Branch-and-bound nodes per solve: a deterministic cap (a time limit would
# make the plan depend on the machine's speed).
NODE_LIMIT = 5000
_INTEGER = highspy.HighsVarType.kInteger
_CONTINUOUS = highspy.HighsVarType.kContinuous


class SolveError(RuntimeError):
    """HiGHS found no solution where one must exist (a modelling bug or numerical trouble)."""


@dataclass(frozen=True)
class Solution:
    x: np.ndarray
    objective: float
    optimal: bool          # proven within the gap (False: node limit reached with a feasible point)

    def value(self, terms: Mapping[int, float]) -> float:
        return float(sum(c * self.x[i] for i, c in terms.items()))


class Infeasible(Exception):
    pass


class LinearModel:
    def __init__(self) -> None:
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.integer: list[bool] = []
        self._cols: list[int] = []
        self._rows: list[int] = []
        self._vals: list[float] = []
        self.row_lb: list[float] = []
        self.row_ub: list[float] = []

    @property
    def size(self) -> int:
        return len(self.lb)

    def var(self, lb: float = 0.0, ub: float = INF, integer: bool = False) -> int:
        self.lb.append(lb)
        self.ub.append(ub)
        self.integer.append(integer)
        return len(self.lb) - 1

    def row(self, terms: Iterable[tuple[int, float]] | Mapping[int, float], lb: float = -INF, ub: float = INF) -> int:
        items = terms.items() if isinstance(terms, Mapping) else terms
        index = len(self.row_lb)
        for col, coef in items:
            if coef:
                self._rows.append(index)
                self._cols.append(col)
                self._vals.append(coef)
        self.row_lb.append(lb)
        self.row_ub.append(ub)
        return index

    def mark(self) -> int:
        """A point to roll rows back to (stage pins are temporary)."""
        return len(self.row_lb)

    def rollback(self, mark: int) -> None:
        keep = [i for i, r in enumerate(self._rows) if r < mark]
        self._rows = [self._rows[i] for i in keep]
        self._cols = [self._cols[i] for i in keep]
        self._vals = [self._vals[i] for i in keep]
        del self.row_lb[mark:]
        del self.row_ub[mark:]

    def solve(self, objective: Mapping[int, float], maximise: bool = False, relax: bool = False,
              gap: float = 1e-4) -> Solution:
        n, rows = self.size, len(self.row_lb)
        cost = np.zeros(n)
        for i, coef in objective.items():
            cost[i] += coef
        a = csc_array((self._vals, (self._rows, self._cols)), shape=(rows, n))
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = n, rows
        lp.col_cost_ = cost
        lp.col_lower_, lp.col_upper_ = np.array(self.lb), np.array(self.ub)
        lp.row_lower_, lp.row_upper_ = np.array(self.row_lb), np.array(self.row_ub)
        lp.sense_ = highspy.ObjSense.kMaximize if maximise else highspy.ObjSense.kMinimize
        matrix = lp.a_matrix_
        matrix.format_ = highspy.MatrixFormat.kColwise
        matrix.num_col_, matrix.num_row_ = n, rows
        matrix.start_, matrix.index_, matrix.value_ = a.indptr, a.indices, a.data
        if not relax and any(self.integer):
            lp.integrality_ = [_INTEGER if i else _CONTINUOUS for i in self.integer]
        h = highspy.Highs()
        for option, value in (("output_flag", False), ("mip_max_nodes", NODE_LIMIT), ("mip_rel_gap", gap),
                              ("threads", 1), ("random_seed", 0)):
            h.setOptionValue(option, value)
        h.passModel(lp)
        h.run()
        status = h.getModelStatus()
        if status in (highspy.HighsModelStatus.kInfeasible, highspy.HighsModelStatus.kUnboundedOrInfeasible):
            raise Infeasible(h.modelStatusToString(status))
        info = h.getInfo()
        if info.primal_solution_status != 2:     # 2: a feasible point
            raise SolveError(f"HiGHS: {h.modelStatusToString(status)}")
        x = np.asarray(h.getSolution().col_value)
        return Solution(x=x, objective=float(info.objective_function_value),
                        optimal=status == highspy.HighsModelStatus.kOptimal)
