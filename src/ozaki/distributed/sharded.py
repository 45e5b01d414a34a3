"""Row- and column-sharded products: A's rows split over the ranks with B whole on every rank
("rows"), or B's columns split with A whole ("cols").

Every entry of C depends only on its row of A, its column of B and the plan, so a rank computes its
rows (columns) of C exactly as one device would, once the plan is the one-device plan. The
planner's inputs are a maximum (bit spans) and minima (lower bounds of |A||B|) over rows and
columns; each rank reduces its own and one all-reduce of two numbers per estimate combines them.
"""

from ..product import Estimates, row_operands, row_stats, planned_product


class ReducedEstimates(Estimates):
    """Estimates of one rank's rows (or columns), combined over the ranks of `group`."""

    shared = True

    def __init__(self, a, bt, stats_a, stats_b, group):
        super().__init__(a, bt, stats_a, stats_b)
        self.group = group

    def combine_max(self, values):
        return self.group.max(values)


def sharded_product(a_local, b_local, dtype, options, group):
    """(C_local, plan): a_local @ b_local with the plan of the whole product (layout "rows" or
    "cols": the operand that is split only changes which part of C a rank gets)."""
    a, bt = row_operands(a_local, b_local)
    stats_a, stats_b = row_stats(a), row_stats(bt)
    est = ReducedEstimates(a, bt, stats_a, stats_b, group)
    return planned_product(est, dtype, options)
