"""dgemm and sgemm: the public products (docs/api.md)."""

import torch

from . import _ops
from .slicing import (MAX_SLICES, SlicePlan, bits_captured, digit_bits_for, full_split_cap,
                      pair_count, slices_for_bits)

ROUNDING_MODES = (None, "nearest")


def _check_operands(name, A, B, dtype):
    """Validate user input with messages that name the argument and the value received."""
    other = {torch.float64: "ozaki.sgemm", torch.float32: "ozaki.dgemm"}[dtype]
    for arg, t in (("A", A), ("B", B)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: {arg} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != dtype:
            hint = f" (use {other} for {t.dtype})" if t.dtype in (torch.float32, torch.float64) else ""
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
    if rounding not in ROUNDING_MODES:
        raise ValueError(f"{name}: rounding must be None or 'nearest', got {rounding!r}")
    if rounding == "nearest":
        raise NotImplementedError(f"{name}: rounding='nearest' (correctly rounded results) is not "
                                  "available yet; use rounding=None")


def _row_operands(A, B):
    """A with contiguous rows and B's columns as contiguous rows (no copy for B = X.t())."""
    return A.contiguous(), B.t().contiguous()


def _resolve_fast(slices, fast):
    """fast=None: fast mode for a given slice count; all pairs for the automatic full split, whose
    point is the exact product (fast mode would drop pairs that can matter at the last bit)."""
    return (slices is not None) if fast is None else fast


def _plan_from_stats(k, dtype, span_a, span_b, slices, fast):
    fast = _resolve_fast(slices, fast)
    beta = digit_bits_for(k)
    if beta < 1:
        raise ValueError(f"inner dimension k = {k} is too large for exact FP16 slice products "
                         "(k must be <= 2^22)")
    # one device-to-host read of the largest bit span (a sync on CUDA)
    spans = torch.stack([s.max() for s in (span_a, span_b) if s.numel()])
    full = slices_for_bits(int(spans.max()) if spans.numel() else 0, beta)
    capped = False
    if slices is None:
        cap = full_split_cap(k, dtype)
        slices, capped = min(full, cap), full > cap
    return SlicePlan(slices=slices, fast=fast, beta=beta, gemms=pair_count(slices, fast),
                     bits_captured=bits_captured(slices, beta), full_split_slices=full,
                     capped=capped)


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
    plan = _plan_from_stats(k, dtype, stats_a[1], stats_b[1], slices, fast)
    C = _ops.gemm_fp16(a, bt, stats_a, stats_b, plan.slices, plan.fast, _ops.workspace_bytes())
    return (C, plan) if want_plan else C


def dgemm(A, B, *, slices=None, fast=None, rounding=None):
    """C = A @ B for float64 matrices, computed from exact FP16 slice products (Ozaki scheme I).

    Args:
        A: (m, k) float64 tensor, on the CPU or a CUDA device.
        B: (k, n) float64 tensor on the same device. Non-contiguous and transposed inputs are fine.
        slices: slices per operand (1..40). More slices capture more bits of every row of A and
            column of B and cost more GEMMs: s(s+1)/2 in fast mode, s^2 otherwise. None splits
            until nothing is left (every entry represented exactly), capped at enough slices for
            2*53 + ceil(log2 k) bits below each row's largest entry (ozaki.slicing.full_split_cap).
        fast: True keeps only the slice pairs with p + q <= s + 1 (1-based), dropping products
            below the kept ones' truncation level: about log2(s) bits less for s(s+1)/2 instead
            of s^2 GEMMs. False keeps all pairs. None (default) means True when `slices` is
            given and False for the automatic full split, so that `dgemm(A, B)` is the exact
            product of the inputs rounded once (unless the cap applies).
        rounding: None (the default FP64 sum); "nearest" is reserved for the correctly rounded
            mode and not available yet.

    Returns:
        (m, n) float64 tensor on the inputs' device.

    Numerics:
        Every slice product is exact, and they are summed level by level in one fixed order with
        compensated FP64 additions, so the result is bit-identical on every run, thread count,
        chunking, CUDA stream and between the CPU and CUDA backends. Its error is the truncation
        of the inputs to the captured bits (none when the full split is not capped) plus about
        one rounding of the sum. NaN and +-Inf inputs give the IEEE result of the plain dot
        product; exact-zero results are +0.
    """
    return _product("ozaki.dgemm", A, B, torch.float64, slices, fast, rounding)


def sgemm(A, B, *, slices=None, fast=None, rounding=None):
    """C = A @ B for float32 matrices: ozaki.dgemm's scheme and promises with float32 in and out.

    The slices come from the exact float32 values, the sum is formed in FP64 exactly as in
    dgemm and rounded once to float32 at the end. `slices=None` caps the full split at
    2*24 + ceil(log2 k) bits below each row's largest entry.
    """
    return _product("ozaki.sgemm", A, B, torch.float32, slices, fast, rounding)


def plan(A, B, *, slices=None, fast=None):
    """The SlicePlan dgemm/sgemm would use for these operands (slices, beta, GEMM count)."""
    if not isinstance(A, torch.Tensor) or A.dtype not in (torch.float64, torch.float32):
        raise TypeError(f"ozaki.plan: A must be a float64 or float32 tensor, got "
                        f"{getattr(A, 'dtype', type(A).__name__)}")
    name = "ozaki.plan"
    _check_operands(name, A, B, A.dtype)
    _check_options(name, slices, fast, None)
    a, bt = _row_operands(A, B)
    k = A.shape[1]
    if k == 0:
        raise ValueError("ozaki.plan: inner dimension k is 0; there is nothing to split")
    return _plan_from_stats(k, A.dtype, _ops.row_stats(a)[1], _ops.row_stats(bt)[1], slices, fast)
