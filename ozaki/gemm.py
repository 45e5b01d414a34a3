"""dgemm and sgemm: the public products (docs/api.md)."""

import torch

from . import _ops
from .planner import auto_plan, nearest_plan, requested_plan
from .slicing import MAX_SLICES, SlicePlan, digit_bits_for

ROUNDING_MODES = (None, "nearest")


def _check_operands(name, A, B, dtype):
    """Validate user input with messages that name the argument and the value received."""
    other = {torch.float64: "ozaki.sgemm", torch.float32: "ozaki.dgemm"}[dtype]
    for arg, t in (("A", A), ("B", B)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: {arg} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != dtype:
            if name == "ozaki.plan":  # plan follows A's dtype: only B can mismatch
                hint = " (B must have A's dtype)"
            elif t.dtype in (torch.float32, torch.float64):
                hint = f" (use {other} for {t.dtype})"
            else:
                hint = ""
            raise TypeError(f"{name}: {arg} must be {dtype}, got {t.dtype}{hint}")
        if t.dim() != 2:
            raise ValueError(f"{name}: {arg} must be 2-D, got {t.dim()}-D with shape {tuple(t.shape)}")
    if A.device != B.device:
        raise ValueError(f"{name}: A and B must be on the same device, got {A.device} and {B.device}")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"{name}: inner dimensions differ: A is {tuple(A.shape)} and B is "
                         f"{tuple(B.shape)} (A.shape[1] must equal B.shape[0])")
    if A.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name}: device must be cpu or cuda, got {A.device}")
    if A.device.type == "cuda" and not _ops.cuda_backend_built():
        raise RuntimeError(f"{name}: the inputs are on {A.device} but this ozaki build has no CUDA "
                           "backend (rebuild with torch's CUDA build and nvcc, OZAKI_FORCE_CUDA=1)")


def _check_options(name, slices, fast, rounding):
    if slices is not None and (isinstance(slices, bool) or not isinstance(slices, int)):
        raise TypeError(f"{name}: slices must be an int or None, got {type(slices).__name__} {slices!r}")
    if slices is not None and not 1 <= slices <= MAX_SLICES:
        raise ValueError(f"{name}: slices must be between 1 and {MAX_SLICES}, got {slices}")
    if fast is not None and not isinstance(fast, bool):
        raise TypeError(f"{name}: fast must be a bool or None, got {type(fast).__name__} {fast!r}")
    if not isinstance(rounding, (str, type(None))) or rounding not in ROUNDING_MODES:
        raise ValueError(f"{name}: rounding must be None or 'nearest', got {rounding!r}")


def _row_operands(A, B):
    """A with contiguous rows and B's columns as contiguous rows (no copy for B = X.t())."""
    return A.contiguous(), B.t().contiguous()


def _usable_rows(stats):
    """Rows that constrain the slice count: nonzero, and without NaN/Inf (whose entries of C get
    the IEEE value of the plain dot product instead)."""
    _, span, nonfinite = stats
    return (span > 0) & ~nonfinite


def _smallest_magnitude(a, bt, stats_a, stats_b):
    """min over usable (i, j) of the exact lower bound of (|A||B|)_ij 2^-(tau_a_i + tau_b_j)."""
    bound = _ops.magnitude_product(a, bt, stats_a, stats_b)
    bound[~_usable_rows(stats_a)] = float("inf")
    bound[:, ~_usable_rows(stats_b)] = float("inf")
    return bound.amin()


def _plan_for(a, bt, stats_a, stats_b, dtype, slices, fast, rounding) -> SlicePlan:
    k = a.shape[1]
    if digit_bits_for(k) < 1:
        raise ValueError(f"inner dimension k = {k} is too large for exact FP16 slice products "
                         "(k must be <= 2^22)")
    max_span = torch.maximum(stats_a[1].max(), stats_b[1].max()).double()
    if rounding == "nearest":
        return nearest_plan(k, dtype, int(max_span), slices, fast)
    if slices is not None:
        return requested_plan(k, dtype, int(max_span), slices, True if fast is None else fast)
    magnitude = _smallest_magnitude(a, bt, stats_a, stats_b).double()
    span, smallest = torch.stack([max_span, magnitude]).tolist()  # one device-to-host read
    return auto_plan(k, dtype, int(span), smallest, fast)


def _product(name, A, B, dtype, slices, fast, rounding, want_plan=False):
    _check_operands(name, A, B, dtype)
    _check_options(name, slices, fast, rounding)
    m, k = A.shape
    n = B.shape[1]
    if m == 0 or n == 0 or k == 0:
        C = torch.zeros((m, n), dtype=dtype, device=A.device)
        return (C, None) if want_plan else C
    a, bt = _row_operands(A, B)
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    plan = _plan_for(a, bt, stats_a, stats_b, dtype, slices, fast, rounding)
    C = _ops.gemm_fp16(a, bt, stats_a, stats_b, plan.slices, plan.fast, rounding == "nearest",
                       _ops.workspace_bytes())
    return (C, plan) if want_plan else C


def dgemm(A, B, *, slices=None, fast=None, rounding=None):
    """C = A @ B for float64 matrices, computed from exact FP16 slice products (Ozaki scheme I).

    Args:
        A: (m, k) float64 tensor, on the CPU or a CUDA device.
        B: (k, n) float64 tensor on the same device. Non-contiguous and transposed inputs are fine.
        slices: slices per operand (1..40). More slices capture more bits of every row of A and
            column of B and cost more GEMMs: s(s+1)/2 in fast mode, s^2 otherwise. None (default)
            plans the count from the operands: the fewest slices whose predicted truncation stays
            below the float64 unit roundoff at the scale of (|A||B|)_ij for every entry, or the
            exact product (all pairs of the full split) when that is as cheap (ozaki.plan shows
            the choice; docs/accuracy.md).
        fast: True keeps only the slice pairs with p + q <= s + 1 (1-based): about log2(s) bits
            less for s(s+1)/2 instead of s^2 GEMMs. False keeps all pairs. None (default): fast
            mode for a given slice count; the planner's choice otherwise.
        rounding: None (default) sums the exact slice products in float64 with compensation
            (about one rounding of the sum). "nearest" returns every entry correctly rounded:
            the exact product of the inputs rounded once to nearest-even, subnormal and
            overflowing results included. Under "nearest", slices and fast only change the speed,
            never the bits.

    Returns:
        (m, n) float64 tensor on the inputs' device.

    Numerics:
        Every slice product is exact, and they are summed level by level in one fixed order, so
        the result is bit-identical on every run, thread count, chunking, CUDA stream and between
        the CPU and CUDA backends. NaN and +-Inf inputs give the IEEE result of the plain dot
        product; inputs near the overflow threshold and subnormal inputs are split without
        spurious overflow or loss. Exact-zero results are +0; under "nearest" a nonzero result
        that rounds to zero keeps its sign.
    """
    return _product("ozaki.dgemm", A, B, torch.float64, slices, fast, rounding)


def sgemm(A, B, *, slices=None, fast=None, rounding=None):
    """C = A @ B for float32 matrices: ozaki.dgemm's scheme and promises with float32 in and out.

    The slices come from the exact float32 values and the planner targets the float32 unit
    roundoff. With rounding=None the sum is formed in float64 and rounded to float32 at the end;
    with rounding="nearest" the exact product is rounded once, straight to float32 (no double
    rounding).
    """
    return _product("ozaki.sgemm", A, B, torch.float32, slices, fast, rounding)


def plan(A, B, *, slices=None, fast=None, rounding=None):
    """The SlicePlan that dgemm (float64 A) or sgemm (float32 A) would use for these operands:
    slices, fast mode, GEMM count, beta, and the predicted error level against the native one."""
    if not isinstance(A, torch.Tensor) or A.dtype not in (torch.float64, torch.float32):
        raise TypeError(f"ozaki.plan: A must be a float64 or float32 tensor, got "
                        f"{getattr(A, 'dtype', type(A).__name__)}")
    name = "ozaki.plan"
    _check_operands(name, A, B, A.dtype)
    _check_options(name, slices, fast, rounding)
    if 0 in (A.shape[0], A.shape[1], B.shape[1]):
        raise ValueError(f"ozaki.plan: A is {tuple(A.shape)} and B is {tuple(B.shape)}; an empty "
                         "product has nothing to split")
    a, bt = _row_operands(A, B)
    return _plan_for(a, bt, _ops.row_stats(a), _ops.row_stats(bt), A.dtype, slices, fast, rounding)
