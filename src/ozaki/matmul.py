"""ozaki.matmul: torch.matmul's semantics (1-D operands, batched and broadcasting shapes) on
ozaki products (docs/torch.md). A batch runs as one ozaki::gemm call, its operands folded as
ozaki/batch_folding.py says, with one plan for the whole batch.
"""

from .batch_folding import folded
from .blas import copy_out
from .distributed.dtensor import dtensor_product
from .gemm_op import REAL_OF, run_gemm
from .operands import at_least, check_alike, check_device, check_tensor, is_dtensor
from .options import Options


def _check(name, a, b):
    check_tensor(name, "a", a, REAL_OF, at_least(1))
    check_tensor(name, "b", b, REAL_OF, at_least(1))
    check_alike(name, ("a", "b"), a, b)
    check_device(name, a.device)
    k_a, k_b = a.shape[-1], b.shape[0] if b.dim() == 1 else b.shape[-2]
    if k_a != k_b:
        raise ValueError(f"{name}: a of shape {tuple(a.shape)} and b of shape {tuple(b.shape)} "
                         f"cannot be multiplied ({k_a} != {k_b})")


def _gemm(A, B, options):
    return run_gemm(A, B, None, 1, 0, options)


def matmul(a, b, *, out=None, backend="auto", slices=None, fast=None, moduli=None, rounding=None):
    """a @ b with torch.matmul's shape rules, computed by ozaki for float64 (dgemm), float32
    (sgemm), complex128 and complex64 (one real product per complex product, docs/torch.md).

    1-D a is a row vector and 1-D b a column vector (the added dimension is removed again);
    batch dimensions broadcast. One plan (backend, slices or moduli) serves the whole batch, so
    each matrix of the result is bit-identical to ozaki.dgemm/sgemm of that pair with the plan
    that ozaki.plan(a, b) reports. The options are ozaki.dgemm's; out, as in ozaki.gemm,
    is a tensor of the result's shape, dtype and device, written in place (never resized; under
    ozaki.enable, torch.matmul's out= is resized as torch resizes it).
    """
    name = "ozaki.matmul"
    if is_dtensor(a) or is_dtensor(b):  # sharded 2-D operands (docs/distributed.md)
        if out is not None:
            raise ValueError(f"{name}: out= is not supported for DTensor operands")
        return dtensor_product(name, a, b, a.dtype, Options(backend, slices, fast, moduli, rounding),
                               names=("a", "b"))
    _check(name, a, b)
    options = Options.checked(name, backend, slices, fast, moduli, rounding)
    A, B, finish = folded(name, a, b)
    result = finish(_gemm(A, B, options))
    return result if out is None else copy_out(name, result, out)
