"""The BLAS-style entry points: ozaki.dgemm, ozaki.sgemm and ozaki.gemm (docs/api.md, docs/torch.md). All of
them run the ozaki::gemm operator (ozaki/gemm_op.py, run_gemm), so they work under autograd and
torch.compile."""

import torch

from .distributed.dtensor import dtensor_product
from .gemm_op import check_addend, check_gemm, nonzero, run_gemm
from .operands import is_dtensor
from .options import Options
from .product import check_operands

#: BLAS's transpose flags: "N" none, "T" transpose, "C" conjugate transpose; False/True = "N"/"T".
TRANSPOSE_FLAGS = {False: "N", True: "T", "N": "N", "T": "T", "C": "C"}


def _real_gemm(name, A, B, dtype, backend, slices, fast, moduli, rounding):
    if is_dtensor(A) or is_dtensor(B):  # sharded operands (docs/distributed.md)
        return dtensor_product(name, A, B, dtype, Options(backend, slices, fast, moduli, rounding))
    check_operands(name, A, B, dtype)
    options = Options.checked(name, backend, slices, fast, moduli, rounding)
    return run_gemm(A, B, None, 1, 0, options)


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
            bits with every backend ("crt" and "auto" run exact scheme II, or scheme I's
            correctly rounded plan where that is cheaper; docs/accuracy.md, "Backends").
            Under "nearest", slices and fast only change the speed, never the bits.

    Returns:
        (m, n) float64 tensor on the inputs' device. Differentiable: the gradients of A and B are
        ozaki products too, with the same options.

    Numerics:
        Every low-precision product is exact and the combination runs in one fixed order, so the
        result is bit-identical on every run, thread count, chunking, CUDA stream and between the
        CPU and CUDA backends (the plan, backend included, is computed exactly from the data, so
        it is the same everywhere). NaN and +-Inf inputs give the IEEE result of the plain dot
        product; inputs near the overflow threshold and subnormal inputs are split without
        spurious overflow or loss. Exact-zero results are +0; under "nearest" a nonzero result
        that rounds to zero keeps its sign.
    """
    return _real_gemm("ozaki.dgemm", A, B, torch.float64, backend, slices, fast, moduli, rounding)


def sgemm(A, B, *, backend="auto", slices=None, fast=None, moduli=None, rounding=None):
    """C = A @ B for float32 matrices: ozaki.dgemm's schemes, options and promises with float32 in
    and out.

    The slices or scaled integers come from the exact float32 values and the planner targets the
    float32 unit roundoff. With rounding=None scheme I sums in float64 and rounds to float32 at
    the end and scheme II rounds the exact A'B' once, straight to float32; with
    rounding="nearest" the exact product is rounded once, straight to float32 (no double
    rounding).
    """
    return _real_gemm("ozaki.sgemm", A, B, torch.float32, backend, slices, fast, moduli, rounding)


def _transposed(name, arg, x, flag):
    if isinstance(flag, (bool, str)) and flag in TRANSPOSE_FLAGS:
        flag = TRANSPOSE_FLAGS[flag]
    else:
        raise ValueError(f"{name}: trans{arg.lower()} must be False, True, 'N', 'T' or 'C', got "
                         f"{flag!r}")
    if flag == "N" or not isinstance(x, torch.Tensor) or x.dim() < 2:
        return x
    return x.mT.conj() if flag == "C" else x.mT


def _as_passed(passed, **flags):
    """For an error about op(A) and op(B): which of them are transposed views, and the shapes of
    the tensors as passed (empty where neither is)."""
    notes = [f"{arg} is op({arg}) for {flag}={value!r}, {arg} as passed is "
             f"{tuple(passed[arg].shape)}"
             for (flag, value), arg in zip(flags.items(), passed)
             if TRANSPOSE_FLAGS[value] != "N" and isinstance(passed[arg], torch.Tensor)
             and passed[arg].dim() >= 2]
    return f" ({'; '.join(notes)})" if notes else ""


def gemm(A, B, C=None, *, alpha=1.0, beta=0.0, transa=False, transb=False, out=None,
         backend="auto", slices=None, fast=None, moduli=None, rounding=None):
    """D = alpha * op(A) @ op(B) + beta * C with BLAS semantics, op(X) = X, X^T or X^H.

    Args:
        A, B: float64, float32, complex128 or complex64 tensors of one dtype, on one device:
            matrices, or batches of matrices (3-D, the same batch size: a batched GEMM).
        C: the addend, broadcastable to the result's shape (m, n) or (batch, m, n); read only
            when beta != 0 (so NaN in C does not leak into a beta = 0 product), and checked then,
            or when it requires grad (its zero gradient).
        alpha, beta: real numbers (Python's, Fraction, NumPy scalars), or complex ones with
            complex operands, taken as float64 (complex128) values and, with float32 or complex64
            operands, rounded to float32 first, as BLAS's sgemm and torch.addmm take them.
            alpha = 0 reads neither A nor B (their shapes are still checked). The epilogue is
            RN(alpha * P) + RN(beta * C) in separate IEEE operations, never fused: alpha = 1 and
            beta = 1 are exact.
        transa, transb: False/"N" (as is), True/"T" (transpose) or "C" (conjugate transpose).
            op(X) is a view: no copy is made for it. The kernels read op(A) by rows and op(B) by
            columns, so those layouts are used in place (e.g. transb=True of a row-major B) and
            any other layout is packed once, O(mk + kn) against the O(mnk) product.
        out: optional tensor of the result's shape, dtype and device to write D into (may be C).
        backend, slices, fast, moduli, rounding: as in ozaki.dgemm; complex operands run one real
            product of shape (2m, 2k) x (2k, n) (docs/torch.md, "Complex products"), and under
            rounding="nearest" the real and imaginary parts of op(A) @ op(B) are each correctly
            rounded.

    Returns:
        D (or out), differentiable in A, B and C.
    """
    name = "ozaki.gemm"
    if any(is_dtensor(x) for x in (A, B, C)):
        raise TypeError(f"{name}: DTensor operands are taken by ozaki.matmul, ozaki.dgemm and "
                        "ozaki.sgemm (docs/distributed.md), not by ozaki.gemm")
    passed = {"A": A, "B": B}
    A = _transposed(name, "A", A, transa)
    B = _transposed(name, "B", B, transb)
    try:
        shape, alpha, beta = check_gemm(name, A, B, C, alpha, beta)
    except ValueError as error:
        notes = _as_passed(passed, transa=transa, transb=transb)
        if not notes:
            raise  # as it is: torch.compile shows a re-raised message only where it is one string
        raise ValueError(f"{error}{notes}") from None
    options = Options.checked(name, backend, slices, fast, moduli, rounding)
    # with beta = 0, C is still handed on where it requires grad, for its zero gradient (torch's
    # addmm gives one); it is never read, but it must fit the result as with beta != 0
    joins_graph = (isinstance(C, torch.Tensor) and C.requires_grad and torch.is_grad_enabled())
    reads_c = nonzero(beta, A.dtype)
    if joins_graph and not reads_c:
        try:
            check_addend(name, C, A.dtype, A.device, shape)
        except (TypeError, ValueError) as error:
            raise type(error)(f"{error} (C requires grad, so with beta = 0 it still gets its "
                              "zero gradient)") from None
    result = run_gemm(A, B, C if reads_c or joins_graph else None, alpha, beta, options)
    return result if out is None else copy_out(name, result, out)


def copy_out(name, result, out):
    """out= as in torch: a tensor of the result's shape, dtype and device, written in place."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{name}: out must be a torch.Tensor, got {type(out).__name__}")
    for what, got, wanted in (("shape", tuple(out.shape), tuple(result.shape)),
                              ("dtype", out.dtype, result.dtype),
                              ("device", out.device, result.device)):
        if got != wanted:
            error = TypeError if what == "dtype" else ValueError
            raise error(f"{name}: out must have the result's {what} {wanted}, got {got}")
    if out.is_leaf and out.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(f"{name}: out is a leaf tensor that requires grad, which out= cannot "
                           "write in place (pass an out that does not require grad, or none)")
    return out.copy_(result)
