"""Complex products from one real ozaki product (docs/torch.md, "Complex products").

Re(AB) = Re A Re B - Im A Im B and Im(AB) = Im A Re B + Re A Im B are dot products of length 2k
of the rows [Re A, -Im A] and [Im A, Re A] with the columns [Re B; Im B]. Stacking both row sets
gives one real product of shape (2m, 2k) x (2k, n): each part of each entry is a single exact dot
product rounded once (correctly rounded under rounding="nearest"), where the usual four real
products round twice and native complex GEMM accumulates in floating point.
"""

import torch

from .product import real_product


def complex_parts(A, B, **options):
    """(Re(A @ B), Im(A @ B), plan) for complex (..., m, k) A and (..., k, n) B with the same
    batch shape (2-D or 3-D), both parts real tensors of A's real dtype."""
    A, B = A.resolve_conj(), B.resolve_conj()
    a_re, a_im = A.real, A.imag
    rows = torch.cat([torch.cat([a_re, -a_im], dim=-1), torch.cat([a_im, a_re], dim=-1)], dim=-2)
    # [Re B; Im B] built column by column (as its transpose), the layout the engine reads B in
    cols = torch.cat([B.real.mT, B.imag.mT], dim=-1).mT
    stacked, plan = real_product(rows, cols, rows.dtype, **options)
    m = A.shape[-2]
    return stacked[..., :m, :], stacked[..., m:, :], plan
