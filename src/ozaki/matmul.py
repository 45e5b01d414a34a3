"""ozaki.matmul: torch.matmul's semantics (1-D operands, batched and broadcasting shapes) on
ozaki products (docs/torch.md).

A batch runs as one ozaki::gemm call: a shared right operand folds the batch into the rows of A,
a shared left operand folds it into the columns of B, and otherwise the broadcast batch runs as a
batched GEMM. Every entry of the result depends only on its row of a, its column of b and the
plan, and the plan is made for the whole batch, so all three forms give the same bits.
"""

import math

import torch

from .blas import copy_out
from .distributed.dtensor import dtensor_product, is_dtensor
from .gemm_op import REAL_OF, run_gemm
from .operands import at_least, broadcast_shape, check_alike, check_device, check_tensor
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
    that ozaki.plan reports for the batch. The options are ozaki.dgemm's; out, as in ozaki.gemm,
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
    if a.dim() == 2 and b.dim() == 2:  # the usual call: no batch to fold, nothing to reshape
        result = _gemm(a, b, options)
        return result if out is None else copy_out(name, result, out)
    vector_a, vector_b = a.dim() == 1, b.dim() == 1
    if vector_a:
        a = a.unsqueeze(0)
    if vector_b:
        b = b.unsqueeze(-1)
    (m, k), n = a.shape[-2:], b.shape[-1]
    batch_a, batch_b = a.shape[:-2], b.shape[:-2]
    # explicit sizes, not -1: reshape cannot infer a size of an empty tensor
    if not batch_b:  # shared right operand: the batch is more rows of A
        rows = a.reshape(math.prod(batch_a) * m, k)
        result = _gemm(rows, b, options).reshape(*batch_a, m, n)
    elif not batch_a:  # shared left operand: the batch is more columns of B
        # (k, batch n), stored by columns as the engine reads B
        columns = b.mT.reshape(math.prod(batch_b) * n, k).mT
        # clone, not contiguous(): an empty result gets torch's strides too
        result = _gemm(a, columns, options).reshape(m, *batch_b, n).movedim(0, -2).clone(
            memory_format=torch.contiguous_format)
    else:
        batch = broadcast_shape(tuple(batch_a), tuple(batch_b))
        if batch is None:  # the type torch.matmul raises, with the arguments named
            raise RuntimeError(f"{name}: the batch dimensions of a {tuple(batch_a)} and b "
                               f"{tuple(batch_b)} do not broadcast (a is {tuple(a.shape)}, b is "
                               f"{tuple(b.shape)})")
        count = math.prod(batch)
        A = a.expand(*batch, m, k).reshape(count, m, k)
        B = b.expand(*batch, k, n).reshape(count, k, n)
        result = _gemm(A, B, options).reshape(*batch, m, n)
    if vector_a:
        result = result.squeeze(-2)
    if vector_b:
        result = result.squeeze(-1)
    return result if out is None else copy_out(name, result, out)
