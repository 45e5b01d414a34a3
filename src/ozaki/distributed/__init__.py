"""ozaki on torch.distributed: products of matrices sharded over the ranks of a process group,
bit-identical to ozaki on one device (docs/distributed.md).

    ozaki.distributed.matmul(a_local, b_local, layout, group=None, **options)

for operands sharded by hand, and DTensors passed straight to ozaki.matmul, ozaki.dgemm and
ozaki.sgemm (ozaki/distributed/dtensor.py). Communication is torch.distributed's own collectives.
"""

import torch

from .. import _ops
from ..operands import check_alike, check_tensor
from ..options import Options
from .collectives import RankGroup
from .inner import DEFAULT_CHUNK_BYTES, inner_product
from .sharded import sharded_product

#: How the operands are split over the ranks, and what each rank gets back:
#: "rows": a_local holds rows of A, b_local all of B; the rank gets its rows of C.
#: "cols": a_local holds all of A, b_local columns of B; the rank gets its columns of C.
#: "inner": a_local holds columns of A and b_local the same rows of B (the inner dimension k is
#: split); every rank gets the whole C.
LAYOUTS = ("rows", "cols", "inner")


def matmul(a_local, b_local, layout, group=None, *, backend="auto", slices=None, fast=None,
           moduli=None, rounding=None):
    """This rank's part of A @ B for float64 (dgemm) or float32 (sgemm) matrices sharded over the
    ranks of `group` (None: the default process group), with ozaki.dgemm's options, bit-identical
    to ozaki.dgemm/sgemm of the whole matrices on one device with the same options.

    layout: "rows", "cols" or "inner" (see LAYOUTS). Shards may have any sizes, empty included,
    and every rank must call with the same layout, options and dtype (checked: a mismatch raises
    the same ValueError on every rank, and inputs that one rank refuses raise on every rank). The
    plan (backend, slices or moduli) is made from the whole matrices, so every rank uses the
    one-device plan.
    """
    name = "ozaki.distributed.matmul"
    group = group if isinstance(group, RankGroup) else RankGroup(group)
    with group.checks_together(name, a_local, b_local):  # one rank refusing stops them all
        _check_local(name, a_local, b_local)
        if layout not in LAYOUTS:
            raise ValueError(f"{name}: layout must be one of {', '.join(map(repr, LAYOUTS))}, "
                             f"got {layout!r}")
        options = Options.checked(name, backend, slices, fast, moduli, rounding)
        workspace = _ops.workspace_bytes()  # OZAKI_WORKSPACE_MB, checked on every rank at once
    m, k = a_local.shape
    n = b_local.shape[1]
    dtype = a_local.dtype
    # what every rank must pass alike, layout first: the shapes compared next depend on it
    alike = {"layout": layout, "dtype": dtype, **options.keywords()}
    if layout == "inner":
        group.check_agree(name, a_local.device, **alike, **{"m (rows of A)": m,
                                                           "n (columns of B)": n})
        total_k = sum(group.agreed_sizes(k, a_local.device))
        if m == 0 or n == 0 or total_k == 0:
            return torch.zeros((m, n), dtype=dtype, device=a_local.device)
        # the ranks' row chunks, and so their all-reduces, must be alike: the smallest budget
        chunk_bytes = min(group.agreed_sizes(workspace or DEFAULT_CHUNK_BYTES, a_local.device))
        return inner_product(a_local, b_local, dtype, options, group, total_k, chunk_bytes)[0]
    shared = {"k (inner dimension)": k}
    shared["n (columns of B)" if layout == "rows" else "m (rows of A)"] = n if layout == "rows" else m
    group.check_agree(name, a_local.device, **alike, **shared)
    split = group.agreed_sizes(m if layout == "rows" else n, a_local.device)
    whole = (sum(split), n) if layout == "rows" else (m, sum(split))
    if 0 in whole or k == 0:
        return torch.zeros((m, n), dtype=dtype, device=a_local.device)
    return sharded_product(a_local, b_local, dtype, options, group)[0]


def _check_local(name, a, b):
    check_tensor(name, "a_local", a)
    check_tensor(name, "b_local", b)
    check_alike(name, ("a_local", "b_local"), a, b)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"{name}: a_local is {tuple(a.shape)} and b_local is {tuple(b.shape)}; "
                         "a_local.shape[1] must equal b_local.shape[0]")
    check_no_grad(name, a, b)


def check_no_grad(name, *tensors):
    """Distributed products are not recorded by autograd: refuse rather than return a result
    whose gradient would silently be missing."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise NotImplementedError(f"{name}: gradients through distributed products are not "
                                  "supported; call it under torch.no_grad() or pass detached "
                                  "tensors")
