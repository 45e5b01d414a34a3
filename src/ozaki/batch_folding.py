"""How torch.matmul's operands (1-D, batched, broadcasting) become the one product ozaki runs for
them, and how its result becomes torch.matmul's: ozaki.matmul runs it, ozaki.plan describes it.

A shared right operand folds the batch into the rows of A, a shared left operand folds it into
the columns of B, and otherwise the broadcast batch runs as a batched GEMM. Every entry of the
result depends only on its row of a, its column of b and the plan, so the three forms give the
same bits; the plan (and a fixed count's sample of rows and columns) is the folded product's.
"""

import math

import torch

from .operands import broadcast_shape


def folded(name, a, b, names=("a", "b")):
    """(A, B, finish): the product's operands, 2-D or (batch, m, k) and (batch, k, n) alike, and
    the function that turns its result into torch.matmul's shape. a and b are checked tensors
    whose inner dimensions agree; names: theirs in the caller's messages."""
    if a.dim() == 2 and b.dim() == 2:  # the usual call: no batch to fold, nothing to reshape
        return a, b, lambda result: result
    vector_a, vector_b = a.dim() == 1, b.dim() == 1
    if vector_a:
        a = a.unsqueeze(0)
    if vector_b:
        b = b.unsqueeze(-1)
    (m, k), n = a.shape[-2:], b.shape[-1]
    batch_a, batch_b = a.shape[:-2], b.shape[:-2]
    # explicit sizes, not -1: reshape cannot infer a size of an empty tensor
    if not batch_b:  # shared right operand: the batch is more rows of A
        A, B = a.reshape(math.prod(batch_a) * m, k), b

        def shaped(result):
            return result.reshape(*batch_a, m, n)
    elif not batch_a:  # shared left operand: the batch is more columns of B
        # (k, batch n), stored by columns as the engine reads B
        A, B = a, b.mT.reshape(math.prod(batch_b) * n, k).mT

        def shaped(result):
            # clone, not contiguous(): an empty result gets torch's strides too
            return result.reshape(m, *batch_b, n).movedim(0, -2).clone(
                memory_format=torch.contiguous_format)
    else:
        batch = broadcast_shape(tuple(batch_a), tuple(batch_b))
        if batch is None:  # the type torch.matmul raises, with the arguments named
            first, second = names
            raise RuntimeError(f"{name}: the batch dimensions of {first} {tuple(batch_a)} and "
                               f"{second} {tuple(batch_b)} do not broadcast ({first} is "
                               f"{tuple(a.shape)}, {second} is {tuple(b.shape)})")
        count = math.prod(batch)
        A = a.expand(*batch, m, k).reshape(count, m, k)
        B = b.expand(*batch, k, n).reshape(count, k, n)

        def shaped(result):
            return result.reshape(*batch, m, n)

    def finish(result):
        result = shaped(result)
        if vector_a:
            result = result.squeeze(-2)
        if vector_b:
            result = result.squeeze(-1)
        return result

    return A, B, finish
