"""k-sharded products ("inner"): rank r holds columns K_r of A and the same rows K_r of B, and every
rank receives the whole C, bit-identical to one device (docs/distributed.md).

Why it is exact: every rank cuts its part of a row with the whole row's exponent tau and the digit
width (or moduli and scale) of the whole inner dimension, so its slices or residues are exactly the
ones one device would cut. What a rank then computes from them are integers on a fixed grid: the
per-level sums of the slice products (scheme I) or the per-modulus INT32 GEMM results (scheme II),
and the planner's digit products. Their all-reduce is exact in any order, and rounding the sums
runs the one-device code on the one-device values. The level sums stay below 2^53 units for every
k scheme I accepts (k <= 2^22 for FP16 digits, below 2^29 for INT8) and the INT32 results below 2^31
for k < 2^17, the limits of one device.

Exact scheme II has no k-shard operator: where one device plans it, the k-shards run the correctly
rounded scheme-I plan, whose bits are the same (both round the exact product once). The plan
itself is the one-device plan: the exact bound it reads from the columns' exponents is computed
from all of them, gathered in rank order.

Two parts are not sums of the ranks' parts and are finished apart: entries whose correct rounding
the slice products leave undecided (rounding="nearest"; their rows and columns are gathered and
multiplied exactly), and rows or columns holding NaN or Inf (their IEEE value comes from counts of
the NaN, +Inf and -Inf terms, which add up).
"""

import torch

from .. import _ops
from .. import crt
from ..options import Options
from ..planner import nearest_plan
from ..product import (Estimates, finished_plan, fixed_count_check, masked_min, planned,
                       row_operands, row_stats, real_product)

#: Memory for one chunk of summed level sums or residue products when OZAKI_WORKSPACE_MB is unset.
DEFAULT_CHUNK_BYTES = 1 << 30
#: Marks "no nonzero entry in this part of the row" in the reduction of row statistics.
_NO_BIT = -(1 << 40)


def global_row_stats(stats_a, stats_b, group):
    """The whole rows' row_stats (tau, bit span, nonfinite) from every rank's part of them: one
    all-reduce of the highest exponent, the lowest set bit and the NaN/Inf flag."""
    tau = torch.cat([stats_a[0], stats_b[0]]).long()
    span = torch.cat([stats_a[1], stats_b[1]]).long()
    nonfinite = torch.cat([stats_a[2], stats_b[2]]).long()
    nonzero = span > 0  # a nonzero part of a row spans at least one bit
    top = torch.where(nonzero, tau, _NO_BIT)
    negated_lowest = torch.where(nonzero, span - tau, _NO_BIT)
    top, negated_lowest, nonfinite = group.max(torch.stack([top, negated_lowest, nonfinite]))
    nonzero = top > _NO_BIT
    tau = torch.where(nonzero, top, 0).int()
    span = torch.where(nonzero, top + negated_lowest, 0).int()
    m = stats_a[0].shape[0]
    whole = [(tau[:m], span[:m], nonfinite[:m].bool()), (tau[m:], span[m:], nonfinite[m:].bool())]
    return tuple(tuple(part.contiguous() for part in stats) for stats in whole)


def norm_scales_from_sums(square_sums, tau):
    """csrc/crt.h norm_scale_code on tensors: with e the smallest integer such that 4^e >= the sum
    (e = 0 for a sum of 1) and nu = tau - 16 + e, the code -16 nu + f of the scale
    (16 + f) 2^(-nu - 4), f the largest in [0, 15] with (16 + f)^2 sum <= 4^(e + 4) (counted: the
    test is monotone in f); -16 tau for a zero row. A sum past 2^53 is rounded up to 53 bits
    first, as there, so that the products stay below 2^63."""
    sums = square_sums.long()
    bits = sum(((sums - 1) >> bit > 0).long() for bit in range(63))  # of sum - 1: highest + 1
    e = torch.where(sums <= 1, 0, (bits + 1) // 2)
    shift = (2 * e - 53).clamp(min=0)
    dropped = sums & (torch.bitwise_left_shift(torch.ones_like(shift), shift) - 1)
    rounded = (sums >> shift) + (dropped != 0).long()
    fraction = 1 << crt.SCALE_FRACTION_BITS
    limit = torch.bitwise_left_shift(torch.ones_like(e), 2 * (e + crt.SCALE_FRACTION_BITS) - shift)
    f = sum(((fraction + f) ** 2 * rounded <= limit).long() for f in range(1, fraction))
    code = -fraction * (tau.long() - 16 + e) + f
    return torch.where(sums == 0, -fraction * tau.long(), code).int()


class InnerEstimates(Estimates):
    """The planner's inputs of a k-shard, computed from the shards' exact partial sums (the whole
    rows' stats are given, so the spans need no reduction)."""

    shared = True

    def __init__(self, a, bt, stats_a, stats_b, group, total_k):
        super().__init__(a, bt, stats_a, stats_b)
        self.group, self.k = group, total_k

    def combine_sum(self, values):
        return self.group.sum(values)

    def column_exponents(self, x, stats):
        """The shard's column exponents gathered in rank order: the whole k's, in the order one
        device reads them, so that the exact entry bound's float64 sum is the one-device sum."""
        local = super().column_exponents(x, stats)
        return self.group.gather_columns(local.view(1, -1)).view(-1)

    def scheme_one_bound(self):
        bound = _ops.magnitude_product(self.a, self.bt, self.stats_a, self.stats_b, self.k)
        return masked_min(self.group.sum(bound), self.stats_a, self.stats_b)

    def norm_scales(self):
        sums = torch.cat([_ops.row_norm_square_sums(self.a, self.stats_a[0]),
                          _ops.row_norm_square_sums(self.bt, self.stats_b[0])])
        codes = norm_scales_from_sums(self.group.sum(sums), torch.cat([self.stats_a[0],
                                                                       self.stats_b[0]]))
        m = self.a.shape[0]
        return codes[:m].contiguous(), codes[m:].contiguous()

    def crt_magnitude(self, norm_a, norm_b) -> float:
        m, n = self.a.shape[0], self.bt.shape[0]
        if self.a.shape[1] == 0:
            digits = torch.zeros((m, n), dtype=torch.int32, device=self.a.device)
        else:
            digits = _ops.int8_matmul(
                _ops.crt_magnitude_digits(self.a, self.stats_a[0], norm_a, self.k),
                _ops.crt_magnitude_digits(self.bt, self.stats_b[0], norm_b, self.k))
        # As ozaki::crt_magnitude scales them: exact.
        bound = self.group.sum(digits).double() * 2.0 ** (-2 * crt.magnitude_gain(self.k))
        return masked_min(bound, self.stats_a, self.stats_b).item()


def _row_chunks(m, bytes_per_row, chunk_bytes):
    rows = max(1, chunk_bytes // max(1, bytes_per_row))
    return [(i0, min(m, i0 + rows)) for i0 in range(0, m, rows)]


def _summed_chunks(m, bytes_per_row, partial, finish, group, chunk_bytes):
    """For each row chunk of at most chunk_bytes (the same on every rank): partial(i0, i1)
    computes this rank's exact partial sums, their all-reduce runs while the next chunk's are
    computed, and finish(i0, i1, sums) rounds them (in chunk order; the sums are exact, so the
    overlap cannot change a bit)."""
    pending = None
    for i0, i1 in _row_chunks(m, bytes_per_row, chunk_bytes):
        sums = partial(i0, i1)
        started = (i0, i1, sums, group.sum_started(sums))
        if pending is not None:
            pending[3].wait()
            finish(*pending[:3])
        pending = started
    if pending is not None:
        pending[3].wait()
        finish(*pending[:3])


def _crt_rounded(a, bt, scales, plan, dtype, group, chunk_bytes):
    scale_a, scale_b = scales
    m, n = a.shape[0], bt.shape[0]
    C = torch.empty((m, n), dtype=dtype, device=a.device)

    def partial(i0, i1):
        return _ops.crt_residue_products(a[i0:i1], bt, scale_a[i0:i1], scale_b, plan.moduli,
                                         _ops.workspace_bytes())

    def finish(i0, i1, sums):
        C[i0:i1] = _ops.crt_round(sums, scale_a[i0:i1], scale_b, dtype)

    _summed_chunks(m, plan.moduli * n * 4, partial, finish, group, chunk_bytes)
    return C


def _levels_rounded(a, bt, stats_a, stats_b, plan, nearest, dtype, group, total_k, chunk_bytes):
    m, n = a.shape[0], bt.shape[0]
    int8 = plan.backend == "int8"
    levels = plan.slices if plan.fast else 2 * plan.slices - 1
    C = torch.empty((m, n), dtype=dtype, device=a.device)
    undecided = torch.zeros((m, n), dtype=torch.bool, device=a.device)

    def partial(i0, i1):
        return _ops.slice_levels(a[i0:i1], bt, stats_a[0][i0:i1], stats_b[0], plan.slices,
                                 plan.fast, int8, total_k, _ops.workspace_bytes())

    def finish(i0, i1, sums):
        rows = tuple(s[i0:i1] for s in stats_a)
        C[i0:i1], undecided[i0:i1] = _ops.round_levels(sums, rows, stats_b, plan.slices, plan.fast,
                                                       int8, total_k, nearest, dtype)

    _summed_chunks(m, levels * n * 8, partial, finish, group, chunk_bytes)
    return C, undecided


def _round_undecided(C, undecided, a, bt, dtype, group):
    """rounding="nearest": entries the summed slice products leave undecided get the correctly
    rounded exact product of their whole rows and columns (gathered from the ranks); correct
    rounding has one answer, so it is the one-device answer."""
    rows = undecided.any(1).nonzero().flatten()
    cols = undecided.any(0).nonzero().flatten()
    a_rows = group.gather_columns(a[rows])
    b_cols = group.gather_columns(bt[cols])
    exact, _ = real_product(a_rows, b_cols.t(), dtype, Options(rounding="nearest"))
    block = C[rows[:, None], cols[None, :]]
    C[rows[:, None], cols[None, :]] = torch.where(undecided[rows[:, None], cols[None, :]], exact,
                                                  block)


def _nonfinite_counts(x, yt):
    """(3, rows, cols) float64 counts of the terms x_il * yt_jl that make the plain dot product NaN,
    +Inf and -Inf (csrc/scheme.h, nonfinite_dot): exact, so the ranks' counts add up."""
    f = lambda mask: mask.double()  # noqa: E731
    x_inf, y_inf = x.isinf(), yt.isinf()
    x_pos, x_neg, y_pos, y_neg = x > 0, x < 0, yt > 0, yt < 0
    nan = (f(x.isnan()).sum(1, keepdim=True) + f(yt.isnan()).sum(1)[None, :]
           + f(x_inf) @ f(yt == 0).T + f(x == 0) @ f(y_inf).T)
    # An infinite x_il meets any nonzero yt_jl; a finite x_il meets an infinite yt_jl.
    positive = (f(x_inf & x_pos) @ f(y_pos).T + f(x_inf & x_neg) @ f(y_neg).T
                + f(x_pos & ~x_inf) @ f(y_inf & y_pos).T + f(x_neg & ~x_inf) @ f(y_inf & y_neg).T)
    negative = (f(x_inf & x_pos) @ f(y_neg).T + f(x_inf & x_neg) @ f(y_pos).T
                + f(x_pos & ~x_inf) @ f(y_inf & y_neg).T + f(x_neg & ~x_inf) @ f(y_inf & y_pos).T)
    overflowing = _overflowing_products(x, yt)
    return torch.stack([nan, positive + overflowing[0], negative + overflowing[1]])


def _overflowing_products(x, yt):
    """(2, rows, cols) float64 counts of the finite x_il, yt_jl whose product overflows the format
    to +Inf and to -Inf, one row (or column) of products at a time."""
    counts = torch.zeros((2, x.shape[0], yt.shape[0]), dtype=torch.float64, device=x.device)
    by_rows = x.shape[0] <= yt.shape[0]
    ones, others = (x, yt) if by_rows else (yt, x)
    finite_others = others.isfinite()
    for i in range(ones.shape[0]):
        products = ones[i] * others  # in the operands' format: +-Inf where it overflows
        over = products.isinf() & finite_others & ones[i].isfinite()
        for sign, mask in enumerate((products > 0, products < 0)):
            count = (over & mask).sum(1, dtype=torch.float64)
            if by_rows:
                counts[sign, i] = count
            else:
                counts[sign, :, i] = count
    return counts


def _nonfinite_values(counts, dtype):
    nan, positive, negative = counts
    value = torch.full(nan.shape, float("nan"), dtype=dtype, device=counts.device)
    value = torch.where((positive > 0) & (negative == 0), float("inf"), value)
    value = torch.where((negative > 0) & (positive == 0), float("-inf"), value)
    return torch.where(nan > 0, float("nan"), value).to(dtype)


def _patch_nonfinite(C, a, bt, stats_a, stats_b, group):
    rows = stats_a[2].nonzero().flatten()
    cols = stats_b[2].nonzero().flatten()
    if rows.numel():
        C[rows] = _nonfinite_values(group.sum(_nonfinite_counts(a[rows], bt)), C.dtype)
    if cols.numel():
        C[:, cols] = _nonfinite_values(group.sum(_nonfinite_counts(a, bt[cols])), C.dtype)


def inner_product(a_local, b_local, dtype, options, group, total_k, chunk_bytes):
    """(C, plan): the whole A @ B from this rank's columns of A and rows of B; chunk_bytes: the
    budget of one row chunk's summed parts, the same on every rank."""
    a, bt = row_operands(a_local, b_local)
    stats_a, stats_b = global_row_stats(row_stats(a), row_stats(bt), group)
    est = InnerEstimates(a, bt, stats_a, stats_b, group, total_k)
    plan, inputs = planned(est, dtype, options)
    run = plan
    if plan.backend == "crt" and plan.exact:
        # exact scheme II's bits are the exact product rounded once: the correctly rounded plan's
        run = nearest_plan(total_k, dtype, est.max_span(), None, None, "int8",
                           "correctly rounded (exact scheme II on one device)")
    if run.backend == "crt" and run.wide:
        # wide scheme II has no k-shard operator: the ranks gather the whole rows, which gives the
        # one-device bits
        C = _ops.gemm_crt_exact(group.gather_columns(a), group.gather_columns(bt), stats_a, stats_b,
                                plan.moduli, _ops.workspace_bytes(),
                                inputs.wide_exponents(plan.moduli, total_k))
    elif run.backend == "crt":
        C = _crt_rounded(a, bt, inputs.scales(plan.moduli, total_k), plan, dtype, group,
                         chunk_bytes)
    else:
        nearest = run.rounding == "nearest"
        C, undecided = _levels_rounded(a, bt, stats_a, stats_b, run, nearest, dtype, group,
                                       total_k, chunk_bytes)
        if nearest and bool(undecided.any()):
            _round_undecided(C, undecided, a, bt, dtype, group)
    _patch_nonfinite(C, a, bt, stats_a, stats_b, group)
    return C, finished_plan(fixed_count_check(plan, est, inputs, dtype), plan)
