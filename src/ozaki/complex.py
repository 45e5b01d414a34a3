"""Complex products from one real ozaki product (docs/torch.md, "Complex products").

Re(AB) = Re A Re B - Im A Im B and Im(AB) = Im A Re B + Re A Im B are dot products of length 2k
of the rows [Re A, -Im A] and [Im A, Re A] with the columns [Re B; Im B]. Stacking both row sets
gives one real product of shape (2m, 2k) x (2k, n): each part of each entry is a single exact dot
product rounded once (correctly rounded under rounding="nearest"), where the usual four real
products round twice and native complex GEMM accumulates in floating point.
"""

import torch

from .operands import InnerDimensionError
from .product import real_product


def _parts(x):
    """(Re x, Im x, -Im x) of a complex tensor as views where they can be, the negated part
    computed on first use; a lazily conjugated x (x.conj(), transa="C") is read without resolving
    it."""
    if x.is_conj():
        stored = x.conj()  # the stored values: Im x = -Im(stored)
        return stored.real, lambda: -stored.imag, lambda: stored.imag
    return x.real, lambda: x.imag, lambda: -x.imag


def complex_parts(A, B, options):
    """(Re(A @ B), Im(A @ B), plan) for complex (..., m, k) A and (..., k, n) B with the same
    batch shape (2-D or 3-D), both parts real tensors of A's real dtype."""
    a_re, a_im, a_im_negated = _parts(A)
    rows = torch.cat([torch.cat([a_re, a_im_negated()], dim=-1),
                      torch.cat([a_im(), a_re], dim=-1)], dim=-2)
    b_re, b_im, _ = _parts(B)
    # [Re B; Im B] built column by column (as its transpose), the layout the engine reads B in
    cols = torch.cat([b_re.mT, b_im().mT], dim=-1).mT
    try:
        stacked, plan = real_product(rows, cols, rows.dtype, options)
    except InnerDimensionError as error:
        k = A.shape[-1]
        raise InnerDimensionError(f"{error} (a complex product of inner dimension k = {k} runs as "
                                  f"one real product of inner dimension 2k = {2 * k})") from None
    m = A.shape[-2]
    return stacked[..., :m, :], stacked[..., m:, :], plan
