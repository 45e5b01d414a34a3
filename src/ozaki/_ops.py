"""Thin wrappers over the C++ operators (schemas in csrc/ozaki.cpp)."""

import math
import os

import torch

from . import _C  # noqa: F401  (loading the library registers torch.ops.ozaki.*)


def cuda_backend_built() -> bool:
    """Whether this build of ozaki has the CUDA backend (setup.py decides at build time)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("ozaki::gemm_slices", "CUDA")


#: cuda_backend_built() read once: a plain constant that torch.compile can trace through.
CUDA_BUILT = cuda_backend_built()


def workspace_bytes() -> int:
    """Workspace budget from OZAKI_WORKSPACE_MB; 0 lets the backend use its default."""
    value = os.environ.get("OZAKI_WORKSPACE_MB", "")
    if not value:
        return 0
    if not (value.isascii() and value.isdigit()):  # int() would take ' 12 ', '1_0', '+5', '٣'
        raise ValueError(f"OZAKI_WORKSPACE_MB must be a positive integer, got {value!r}")
    digits = value.lstrip("0")
    if not digits:
        raise ValueError(f"OZAKI_WORKSPACE_MB must be a positive integer, got {value!r}")
    # its bytes reach 2^63, past the operators' int64 (more than 13 digits: not converted at all,
    # where int() would refuse thousands of them with a message of its own)
    if len(digits) > 13 or int(digits) >= 1 << 43:
        raise ValueError(f"OZAKI_WORKSPACE_MB must be below 2^43 (8796093022208), got {value!r}")
    return int(digits) << 20


def is_column_view(bt: torch.Tensor) -> bool:
    """Whether bt (n, k) or (batch, n, k) is B.mT of a contiguous B: B's columns, which the CUDA
    operators that say so read in place. The same test as theirs (csrc/checks.h,
    is_column_view), stride by stride: torch's is_contiguous passes any stride of a dimension of
    size 1, such as a batch of one taken every other matrix, which those operators refuse."""
    if bt.dim() not in (2, 3) or bt.is_contiguous():
        return False
    n, k = bt.shape[-2], bt.shape[-1]
    return bt.stride(-2) == 1 and bt.stride(-1) == n and (bt.dim() == 2 or bt.stride(0) == n * k)


def flat_rows(x: torch.Tensor) -> torch.Tensor:
    """The rows of a matrix or of a batch's matrices as one (rows, k) matrix (row e*m + i); sizes
    spelled out, as -1 is ambiguous for k = 0 (an empty k-shard). A matrix is itself."""
    return x if x.dim() == 2 else x.reshape(math.prod(x.shape[:-1]), x.shape[-1])


def rows_as_read(x: torch.Tensor) -> torch.Tensor:
    """x's rows as the per-row operators that read B's columns in place take them: x itself where
    it is B's columns (is_column_view), else flat_rows(x)."""
    return x if is_column_view(x) else flat_rows(x)


def transposed(b: torch.Tensor) -> torch.Tensor:
    """b.mT.contiguous() of a float64/float32 (k, n) or (batch, k, n) tensor, always a fresh
    tensor; on CUDA a tiled shared-memory transpose."""
    return torch.ops.ozaki.transposed(b)


def fingerprint(a: torch.Tensor) -> torch.Tensor:
    """A 64-bit digest (0-d int64 tensor on a's device) of a float64/float32 (m, k) matrix's
    entries and their positions: the same bits on every backend (csrc/fingerprint.h)."""
    return torch.ops.ozaki.fingerprint(a)


class RowStats(tuple):
    """(tau, bit_span, nonfinite) of a set of rows (row_stats); usable: the rows that constrain
    the plans, nonzero and without NaN/Inf, computed once."""

    @property
    def usable(self):
        if "_usable" not in self.__dict__:
            # span > 0 and finite, in one comparison of booleans (only True > False holds)
            self._usable = (self[1] > 0) > self[2]
        return self._usable

    @classmethod
    def with_usable(cls, stats, usable):
        """RowStats of stats whose usable rows are already known."""
        row_stats = cls(stats)
        row_stats._usable = usable
        return row_stats


def usable_rows(stats):
    """Rows that constrain the plans: nonzero, and without NaN/Inf (whose entries of C get the
    IEEE value of the plain dot product instead); read once per RowStats."""
    return (stats if isinstance(stats, RowStats) else RowStats(stats)).usable


def row_stats(a: torch.Tensor):
    """Per row of a contiguous (rows, k) matrix: RowStats (tau, bit_span, nonfinite)."""
    return RowStats(torch.ops.ozaki.row_stats(a))


def split_rows(a: torch.Tensor, tau: torch.Tensor, slices: int) -> torch.Tensor:
    """The FP16 slices of every row of a, scaled by 2^-tau: shape (slices, rows, k)."""
    return torch.ops.ozaki.split_rows(a, tau, slices)


def magnitude_product(a, bt, stats_a, stats_b, total_k: int = 0) -> torch.Tensor:
    """Exact lower bound of (|a| |bt|^T)_ij 2^-(tau_a_i + tau_b_j), float64 (m, n); total_k: the
    whole inner dimension when a and bt are a k-shard of it."""
    return torch.ops.ozaki.magnitude_product(a, bt, stats_a[0], stats_b[0], total_k)


def sampled_magnitudes(a, bt, tau_a, tau_b, usable_a, usable_b, rows_a, rows_b, m, n,
                       norm_a=None, norm_b=None) -> torch.Tensor:
    """float64 (len(rows_a), len(rows_b)): sum_l |a_il| 2^-tau_a_i |bt_jl| 2^-tau_b_j for the rows
    i = rows_a[r] of the flattened a and j = rows_b[c] of bt, in one summation order on every
    device; times c_i 2^tau_i c_j 2^tau_j with norm scale codes; +inf for rows not usable or of
    different elements (m and n rows each) of a batch. On CUDA bt may also be B's columns in place
    (is_column_view, 2-D or 3-D; row j of bt.reshape(-1, k))."""
    return torch.ops.ozaki.sampled_magnitudes(a, bt, tau_a, tau_b, usable_a, usable_b, rows_a,
                                              rows_b, m, n, norm_a, norm_b)


def gemm_slices(a, bt, stats_a, stats_b, slices: int, fast: bool, nearest: bool = False,
                workspace: int = 0, int8: bool = False):
    """a @ bt.T by scheme I with FP16 (or, int8=True, INT8) slices; stats_* are row_stats of a and
    bt; nearest: correctly rounded."""
    return torch.ops.ozaki.gemm_slices(a, bt, stats_a[0], stats_b[0], stats_a[1], stats_b[1],
                                       stats_a[2], stats_b[2], slices, fast, nearest, int8,
                                       workspace)


def row_norm_scales(a: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """Per row of a: the int32 code of its norm scale, the largest c = (16 + f) 2^(e - 4) with
    ||row||_2 c <= 1 (ozaki.crt.scale_value decodes it)."""
    return torch.ops.ozaki.row_norm_scales(a, tau)


def row_stats_with_norm_scales(a: torch.Tensor):
    """((tau, bit_span, nonfinite), norm_scales): row_stats(a) and row_norm_scales(a, tau) in one
    call (on CUDA one read of a). On CUDA a may also be B's columns in place (is_column_view, 2-D or
    3-D): the values of a.reshape(-1, k)'s rows."""
    tau, bit_span, nonfinite, norm_scales = torch.ops.ozaki.row_stats_with_norm_scales(a)
    return RowStats((tau, bit_span, nonfinite)), norm_scales


def crt_wide_exponents(norm_scales, stats, t: int) -> torch.Tensor:
    """Wide scheme II: per row, the int32 exponent E of its scale 2^E <= c 2^t (c: its norm scale,
    code norm_scales) on usable rows; other rows (zero, or holding NaN/Inf: their entries of C are
    patched) keep integer_exponents'."""
    return torch.ops.ozaki.crt_wide_exponents(norm_scales, stats[0], stats[1], usable_rows(stats),
                                              t)


def crt_row_bounds(stats, norm_scales) -> torch.Tensor:
    """float64 (2,): the rows' largest bit span and exact scheme II's bound on their 2-norms once
    scaled to integers (the largest 2^E / c over usable rows, within a rounding; csrc/crt.h,
    integer_norm_bound)."""
    return torch.ops.ozaki.crt_row_bounds(*stats, norm_scales)


def crt_row_scales(norm_scales: torch.Tensor, stats, t: int) -> torch.Tensor:
    """Per row: the int32 code of its scheme-II scale for budget 2^t (csrc/crt.h,
    crt_row_scale_code), from the code of its norm scale and its row_stats."""
    return torch.ops.ozaki.crt_row_scales(norm_scales, stats[0], stats[1], t)


def crt_plan_reads(a, bt):
    """(stats_a, norm_a, stats_b, norm_b, values) in one call: row_stats_with_norm_scales of a's
    rows and of bt's (flattened when batched; RowStats with their usable rows set), and float64
    (5,) values -crt_magnitude, crt_row_bounds of a's rows, crt_row_bounds of bt's."""
    (tau_a, span_a, nonfinite_a, norm_a, usable_a,
     tau_b, span_b, nonfinite_b, norm_b, usable_b, values) = torch.ops.ozaki.crt_plan_reads(a, bt)
    return (RowStats.with_usable((tau_a, span_a, nonfinite_a), usable_a), norm_a,
            RowStats.with_usable((tau_b, span_b, nonfinite_b), usable_b), norm_b, values)


def crt_kept_plan_reads(a, stats_a, norm_a, digits_a, bounds_a, column_exponents_a, bt):
    """crt_plan_reads for a product whose left operand a (a matrix) is prepared, from its kept
    parts (digits_a: crt_magnitude_digits of its rows, padded with zeros to a multiple of 16
    columns): (stats_b, norm_b, values): bt's RowStats (usable rows set) and norm scale codes, and
    float64 values -crt_magnitude, a's and bt's crt_row_bounds, then exact scheme II's entry bound
    sum (crt_entry_bound_sum) where a's column exponents are given (else None)."""
    tau_b, span_b, nonfinite_b, norm_b, usable_b, values = torch.ops.ozaki.crt_kept_plan_reads(
        a, *stats_a, usable_rows(stats_a), norm_a, digits_a, bounds_a, column_exponents_a, bt)
    return RowStats.with_usable((tau_b, span_b, nonfinite_b), usable_b), norm_b, values


def crt_entry_bound_sum(exponents_a, exponents_b) -> torch.Tensor:
    """Exact scheme II's entry bound sum_l 2^(u_l + v_l) of column exponents u and v, (elements,
    k) int64 or float64 each, in one summation order on every device (terms clamped to
    2^[-1000, 900], none for exponents below -2000): the largest over the elements, 0-d float64."""
    return torch.ops.ozaki.crt_entry_bound_sum(exponents_a, exponents_b)


def crt_magnitude(a, bt, stats_a, stats_b, norm_a, norm_b, usable_a, usable_b) -> torch.Tensor:
    """Exact lower bound of min over usable (i, j) of (|a| |bt|^T)_ij c_a_i c_b_j, 0-d (c: the norm
    scales of row_norm_scales)."""
    return torch.ops.ozaki.crt_magnitude(a, bt, stats_a[0], stats_b[0], norm_a, norm_b, usable_a,
                                         usable_b)


def gemm_crt(a, bt, scale_a, scale_b, stats_a, stats_b, moduli: int, workspace: int = 0,
             residues_a=None):
    """a @ bt.T by scheme II: RN(A'B' / (c_a_i c_b_j)) with A' = RN(a_i c_a_i), B' = RN(bt_j c_b_j)
    (scale codes scale_a, scale_b). residues_a: crt_left_residues(a, scale_a, moduli), if kept."""
    return torch.ops.ozaki.gemm_crt(a, bt, scale_a, scale_b, stats_a[2], stats_b[2], moduli,
                                    workspace, residues_a)


def integer_exponents(stats):
    """Per row, the exponent E that makes every entry of the row an integer: minus the exponent
    of its lowest set bit (row_stats: tau - span), int32; 0 for a zero row."""
    return (stats[1] - stats[0]).int()


def gemm_crt_exact(a, bt, stats_a, stats_b, moduli: int, workspace: int = 0, exponents=None,
                   residues_a=None):
    """a @ bt.T by exact scheme II, correctly rounded: rows scaled by 2^E to integers
    (integer_exponents), their product rebuilt exactly from `moduli` INT8 residue products.
    exponents: wide scheme II's (E_a, E_b) instead, whose scaled entries are rounded to integers;
    the product of those is rebuilt exactly and rounded once. residues_a:
    crt_left_residues(a, E_a, moduli, exact=True), if kept."""
    if exponents is None:
        exponents = integer_exponents(stats_a), integer_exponents(stats_b)
    return torch.ops.ozaki.gemm_crt_exact(a, bt, *exponents, stats_a[2], stats_b[2], moduli,
                                          workspace, residues_a)


def crt_left_residues(a, scale, moduli: int, exact: bool) -> torch.Tensor:
    """The INT8 residues gemm_crt (scale: its scale_a codes) or gemm_crt_exact (exact; scale: its
    row exponents of a) computes for a's rows, to pass back as residues_a."""
    return torch.ops.ozaki.crt_left_residues(a, scale, moduli, exact)


# ---- k-sharded products (csrc/ozaki.cpp; ozaki/distributed/inner.py) -----------------------------

def slice_levels(a, bt, tau_a, tau_b, slices: int, fast: bool, int8: bool, total_k: int,
                 workspace: int = 0) -> torch.Tensor:
    """Scheme I's exact level sums of a k-shard: float64 (levels, m, n)."""
    return torch.ops.ozaki.slice_levels(a, bt, tau_a, tau_b, slices, fast, int8, total_k, workspace)


def round_levels(levels, stats_a, stats_b, slices: int, fast: bool, int8: bool, total_k: int,
                 nearest: bool, dtype: torch.dtype):
    """(C, undecided) from the summed level sums; stats_* are the whole rows' row_stats."""
    return torch.ops.ozaki.round_levels(levels, stats_a[0], stats_b[0], stats_a[1], stats_b[1],
                                        slices, fast, int8, total_k, nearest, dtype)


def row_norm_square_sums(a: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """Per row of a: the int64 sum that row_norm_scales turns into the norm scale."""
    return torch.ops.ozaki.row_norm_square_sums(a, tau)


def crt_magnitude_digits(a: torch.Tensor, tau: torch.Tensor, norm: torch.Tensor,
                         total_k: int = 0) -> torch.Tensor:
    """int8 magnitude digits min(127, floor(|a| c 2^g)) of every entry (rows, k), c the rows' norm
    scales (codes norm), g the gain of inner dimension total_k (0: a's own; csrc/crt.h,
    magnitude_digit)."""
    return torch.ops.ozaki.crt_magnitude_digits(a, tau, norm, total_k)


def int8_matmul(a: torch.Tensor, bt: torch.Tensor) -> torch.Tensor:
    """Exact int32 a @ bt.T of int8 (m, k) and (n, k) matrices."""
    return torch.ops.ozaki.int8_matmul(a, bt)


def crt_residue_products(a, bt, scale_a, scale_b, moduli: int, workspace: int = 0) -> torch.Tensor:
    """Scheme II's exact per-modulus INT32 products of a k-shard: int32 (moduli, m, n)."""
    return torch.ops.ozaki.crt_residue_products(a, bt, scale_a, scale_b, moduli, workspace)


def crt_round(products, scale_a, scale_b, dtype: torch.dtype) -> torch.Tensor:
    """gemm_crt's result from summed crt_residue_products."""
    return torch.ops.ozaki.crt_round(products, scale_a, scale_b, dtype)
