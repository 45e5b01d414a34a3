"""dgemm and sgemm: the public products (docs/api.md)."""

import dataclasses

import torch

from . import _ops
from . import moduli as crt
from .planner import auto_plan, crt_plan, nearest_plan, requested_plan
from .slicing import MAX_SLICES, SlicePlan, digit_bits_for, slices_for_bits

ROUNDING_MODES = (None, "nearest")
#: "auto" picks among the others by the rule of docs/accuracy.md, "Backends".
BACKENDS = ("auto", "fp16", "int8", "crt")


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


def _check_options(name, slices, fast, rounding, backend="auto", moduli=None):
    if slices is not None and (isinstance(slices, bool) or not isinstance(slices, int)):
        raise TypeError(f"{name}: slices must be an int or None, got {type(slices).__name__} {slices!r}")
    if slices is not None and not 1 <= slices <= MAX_SLICES:
        raise ValueError(f"{name}: slices must be between 1 and {MAX_SLICES}, got {slices}")
    if fast is not None and not isinstance(fast, bool):
        raise TypeError(f"{name}: fast must be a bool or None, got {type(fast).__name__} {fast!r}")
    if not isinstance(rounding, (str, type(None))) or rounding not in ROUNDING_MODES:
        raise ValueError(f"{name}: rounding must be None or 'nearest', got {rounding!r}")
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"{name}: backend must be one of {', '.join(map(repr, BACKENDS))}, "
                         f"got {backend!r}")
    if moduli is not None and (isinstance(moduli, bool) or not isinstance(moduli, int)):
        raise TypeError(f"{name}: moduli must be an int or None, got {type(moduli).__name__} {moduli!r}")
    if moduli is not None and not 1 <= moduli <= crt.MAX_MODULI:
        raise ValueError(f"{name}: moduli must be between 1 and {crt.MAX_MODULI}, got {moduli}")
    if moduli is not None and backend not in ("auto", "crt"):
        raise ValueError(f"{name}: moduli applies to backend='crt', got backend={backend!r}")
    scheme_one = [arg for arg, value in (("slices", slices), ("fast", fast)) if value is not None]
    if backend == "crt" and scheme_one and rounding is None:
        raise ValueError(f"{name}: {scheme_one[0]} applies to the scheme-I backends ('fp16', "
                         f"'int8'), not to backend='crt' (use moduli=)")
    if moduli is not None and scheme_one:
        raise ValueError(f"{name}: moduli (scheme II) cannot be combined with {scheme_one[0]} "
                         "(scheme I)")
    if moduli is not None and rounding == "nearest":
        raise ValueError(f"{name}: rounding='nearest' runs the exact INT8 scheme-I path; moduli "
                         "does not apply to it")


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


def _max_span(stats_a, stats_b):
    """The largest bit span of any row of A or column of B (row_stats), a 0-d device tensor."""
    return torch.maximum(stats_a[1].max(), stats_b[1].max())


def _check_inner(k, digits):
    if digits == "int8" and digit_bits_for(k, "int8") < 1:
        raise ValueError(f"inner dimension k = {k} is too large for exact INT8 slice products "
                         "(k must be < 2^29)")
    if digits == "fp16" and digit_bits_for(k) < 1:
        raise ValueError(f"inner dimension k = {k} is too large for exact FP16 slice products "
                         "(k must be <= 2^22)")


def _scheme_one_plan(a, bt, stats_a, stats_b, dtype, slices, fast, rounding, digits, reason=None):
    k = a.shape[1]
    _check_inner(k, digits)
    max_span = _max_span(stats_a, stats_b).double()
    if rounding == "nearest":
        return nearest_plan(k, dtype, int(max_span), slices, fast, digits,
                            reason or "correctly rounded")
    if slices is not None:
        return requested_plan(k, dtype, int(max_span), slices, True if fast is None else fast, digits)
    span, smallest = _span_and_magnitude(a, bt, stats_a, stats_b, max_span)
    return auto_plan(k, dtype, span, smallest, fast, digits)


def _span_and_magnitude(a, bt, stats_a, stats_b, max_span):
    """(largest bit span, scheme I's magnitude estimate) in one device-to-host read; the estimate
    is 0 (unresolved) past the FP16 estimate's reach (k > 2^22)."""
    if digit_bits_for(a.shape[1]) < 1:
        return int(max_span), 0.0
    magnitude = _smallest_magnitude(a, bt, stats_a, stats_b).double()
    span, smallest = torch.stack([max_span, magnitude]).tolist()
    return int(span), smallest


class _CrtInputs:
    """The per-row norm exponents scheme II scales by (computed once, used by plan and product)."""

    def __init__(self, a, bt, stats_a, stats_b):
        self.nu_a = _ops.row_norm_exponents(a, stats_a[0])
        self.nu_b = _ops.row_norm_exponents(bt, stats_b[0])

    def magnitude(self, a, bt, stats_a, stats_b) -> float:
        return _ops.crt_magnitude(a, bt, stats_a, stats_b, self.nu_a, self.nu_b,
                                  _usable_rows(stats_a), _usable_rows(stats_b)).item()

    def shifts(self, plan: SlicePlan, k: int):
        t_a, t_b = crt.scale_bits(plan.moduli, k)
        return (t_a - self.nu_a).int(), (t_b - self.nu_b).int()


def _plan_for(a, bt, stats_a, stats_b, dtype, slices, fast, rounding, backend="fp16", moduli=None):
    """(plan, crt_inputs): the backend and its plan by the rules of docs/accuracy.md, "Backends";
    crt_inputs is set when the plan is scheme II."""
    k = a.shape[1]
    if rounding == "nearest":  # the exact INT8 split is the cheapest correctly rounded path
        digits = "fp16" if backend == "fp16" else "int8"
        reason = ("correctly rounded (INT8 scheme I: scheme II truncates)" if backend == "crt"
                  else "correctly rounded")
        return _scheme_one_plan(a, bt, stats_a, stats_b, dtype, slices, fast, rounding, digits,
                                reason), None
    if backend in ("fp16", "int8"):
        return _scheme_one_plan(a, bt, stats_a, stats_b, dtype, slices, fast, None, backend), None
    if backend == "auto" and (slices is not None or fast is not None):
        return _scheme_one_plan(a, bt, stats_a, stats_b, dtype, slices, fast, None, "fp16"), None
    if k > crt.MAX_INNER:
        if backend == "crt" or moduli is not None:
            raise ValueError(f"inner dimension k = {k} is too large for backend='crt' (exact INT8 "
                             f"residue products need k <= {crt.MAX_INNER})")
        return _fastest_scheme_one(a, bt, stats_a, stats_b, dtype), None
    inputs = _CrtInputs(a, bt, stats_a, stats_b)
    magnitude = None if moduli is not None else inputs.magnitude(a, bt, stats_a, stats_b)
    plan = crt_plan(k, dtype, magnitude, moduli)
    if backend == "auto" and plan.capped:
        return _fastest_scheme_one(a, bt, stats_a, stats_b, dtype), None
    if backend == "auto" and moduli is None:
        exact = _exact_int8_plan(a, bt, stats_a, stats_b, dtype)
        if exact.gemms <= plan.gemms:  # short rows (integers, few binades): exact and cheaper
            return exact, None
    return plan, inputs


def _exact_int8_plan(a, bt, stats_a, stats_b, dtype):
    """All pairs of the full INT8 split: the exact product rounded once (no estimate needed)."""
    k = a.shape[1]
    max_span = int(_max_span(stats_a, stats_b))
    full = slices_for_bits(max_span, digit_bits_for(k, "int8"))
    plan = requested_plan(k, dtype, max_span, min(full, MAX_SLICES), False, "int8")
    return dataclasses.replace(plan, reason="exact")


def _fastest_scheme_one(a, bt, stats_a, stats_b, dtype):
    """The automatic scheme-I plan with the lower cost in FP16-GEMM units (an INT8 GEMM counts
    half: the H100 runs them about twice as fast); INT8 on a tie. FP16 is left out past its
    exactness limit (k > 2^22)."""
    k = a.shape[1]
    kinds = ("int8", "fp16") if digit_bits_for(k) >= 1 else ("int8",)
    max_span = _max_span(stats_a, stats_b).double()
    span, smallest = _span_and_magnitude(a, bt, stats_a, stats_b, max_span)  # shared by both
    plans = [auto_plan(k, dtype, span, smallest, None, digits) for digits in kinds]
    return min(plans, key=lambda p: p.gemms * (1 if p.backend == "int8" else 2))


def _product(name, A, B, dtype, slices, fast, rounding, backend, moduli, want_plan=False):
    _check_operands(name, A, B, dtype)
    _check_options(name, slices, fast, rounding, backend, moduli)
    m, k = A.shape
    n = B.shape[1]
    if m == 0 or n == 0 or k == 0:
        C = torch.zeros((m, n), dtype=dtype, device=A.device)
        return (C, None) if want_plan else C
    a, bt = _row_operands(A, B)
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    plan, inputs = _plan_for(a, bt, stats_a, stats_b, dtype, slices, fast, rounding, backend, moduli)
    if plan.backend == "crt":
        shift_a, shift_b = inputs.shifts(plan, k)
        C = _ops.gemm_crt(a, bt, shift_a, shift_b, stats_a, stats_b, plan.moduli,
                          _ops.workspace_bytes())
    else:
        C = _ops.gemm_slices(a, bt, stats_a, stats_b, plan.slices, plan.fast, rounding == "nearest",
                             _ops.workspace_bytes(), int8=plan.backend == "int8")
    return (C, plan) if want_plan else C


def dgemm(A, B, *, backend="auto", slices=None, fast=None, moduli=None, rounding=None):
    """C = A @ B for float64 matrices, computed from exact low-precision tensor-core products.

    Args:
        A: (m, k) float64 tensor, on the CPU or a CUDA device.
        B: (k, n) float64 tensor on the same device. Non-contiguous and transposed inputs are fine.
        backend: how the exact products are formed (docs/algorithm.md):
            "crt": Ozaki scheme II. Rows of A and columns of B are scaled to integers, A'B' is
                computed exactly from one INT8 GEMM per modulus on residues and rebuilt by the
                Chinese Remainder Theorem, then rounded once. The fastest; k < 2^17.
            "int8": Ozaki scheme I with INT8 slices (7 bits each, INT32 accumulation).
            "fp16": Ozaki scheme I with FP16 slices (FP32 accumulation), the founding paper's.
            "auto" (default): "crt" when its plan meets the accuracy target within 16 moduli,
                else the cheaper of the "int8" and "fp16" plans; "fp16" when slices or fast is
                given; "int8" for rounding="nearest" (docs/accuracy.md, "Backends").
        slices: scheme I: slices per operand (1..40). More slices capture more bits of every row
            of A and column of B and cost more GEMMs: s(s+1)/2 in fast mode, s^2 otherwise. None
            (default) plans the count from the operands: the fewest slices whose predicted
            truncation stays below the float64 unit roundoff at the scale of (|A||B|)_ij for every
            entry, or the exact product (all pairs of the full split) when that is as cheap
            (ozaki.plan shows the choice; docs/accuracy.md).
        fast: scheme I: True keeps only the slice pairs with p + q <= s + 1 (1-based): about
            log2(s) bits less for s(s+1)/2 instead of s^2 GEMMs. False keeps all pairs. None
            (default): fast mode for a given slice count; the planner's choice otherwise.
        moduli: scheme II: moduli (1..16), one INT8 GEMM each; each adds about 8 bits to the
            scaled operands (4 per operand). None (default) plans the count against the same
            target as slices, from 2-norm bounds of the rows and an exact lower bound of |A||B|
            (one extra INT8 GEMM).
        rounding: None (default): scheme I sums the exact slice products in float64 with
            compensation (about one rounding of the sum); scheme II rounds the exact A'B' once.
            "nearest" returns every entry correctly rounded: the exact product of the inputs
            rounded once to nearest-even, subnormal and overflowing results included, the same
            bits with every backend ("crt" and "auto" run the exact INT8 scheme-I path for it).
            Under "nearest", slices and fast only change the speed, never the bits.

    Returns:
        (m, n) float64 tensor on the inputs' device.

    Numerics:
        Every low-precision product is exact and the combination runs in one fixed order, so the
        result is bit-identical on every run, thread count, chunking, CUDA stream and between the
        CPU and CUDA backends (the plan, backend included, is computed exactly from the data, so
        it is the same everywhere). NaN and +-Inf inputs give the IEEE result of the plain dot
        product; inputs near the overflow threshold and subnormal inputs are split without
        spurious overflow or loss. Exact-zero results are +0; under "nearest" a nonzero result
        that rounds to zero keeps its sign.
    """
    return _product("ozaki.dgemm", A, B, torch.float64, slices, fast, rounding, backend, moduli)


def sgemm(A, B, *, backend="auto", slices=None, fast=None, moduli=None, rounding=None):
    """C = A @ B for float32 matrices: ozaki.dgemm's schemes, options and promises with float32 in
    and out.

    The slices or scaled integers come from the exact float32 values and the planner targets the
    float32 unit roundoff. With rounding=None scheme I sums in float64 and rounds to float32 at
    the end and scheme II rounds the exact A'B' once, straight to float32; with
    rounding="nearest" the exact product is rounded once, straight to float32 (no double
    rounding).
    """
    return _product("ozaki.sgemm", A, B, torch.float32, slices, fast, rounding, backend, moduli)


def plan(A, B, *, backend="auto", slices=None, fast=None, moduli=None, rounding=None):
    """The SlicePlan that dgemm (float64 A) or sgemm (float32 A) would use for these operands:
    the backend, slices and fast mode (scheme I) or moduli (scheme II), GEMM count, and the
    predicted error level against the native one."""
    if not isinstance(A, torch.Tensor) or A.dtype not in (torch.float64, torch.float32):
        raise TypeError(f"ozaki.plan: A must be a float64 or float32 tensor, got "
                        f"{getattr(A, 'dtype', type(A).__name__)}")
    name = "ozaki.plan"
    _check_operands(name, A, B, A.dtype)
    _check_options(name, slices, fast, rounding, backend, moduli)
    if 0 in (A.shape[0], A.shape[1], B.shape[1]):
        raise ValueError(f"ozaki.plan: A is {tuple(A.shape)} and B is {tuple(B.shape)}; an empty "
                         "product has nothing to split")
    a, bt = _row_operands(A, B)
    return _plan_for(a, bt, _ops.row_stats(a), _ops.row_stats(bt), A.dtype, slices, fast,
                     rounding, backend, moduli)[0]
