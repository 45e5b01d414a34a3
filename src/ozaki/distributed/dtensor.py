"""DTensor operands of ozaki.matmul, ozaki.dgemm and ozaki.sgemm (docs/distributed.md).

The three placements the products run on directly, and what the result is:
    A Shard(0)  x B Replicate -> C Shard(0)    (layout "rows")
    A Replicate x B Shard(1)  -> C Shard(1)    (layout "cols")
    A Shard(1)  x B Shard(0)  -> C Replicate   (layout "inner": exact combination of the k-shards)
A Replicate x B Replicate gives C Replicate, every rank computing the whole product. Any other
pair is first redistributed by DTensor (PLACEMENT_RULES, in order). The result is bit-identical
to the one-device product of the whole matrices.
"""

import torch

from .. import _ops
from ..operands import is_dtensor
from ..options import Options


def _targets(a, b):
    """(layout, A's placement, B's placement, C's placement) for the given placements."""
    from torch.distributed.tensor import Replicate, Shard

    rows, cols, inner = Shard(0), Shard(1), (Shard(1), Shard(0))
    if a == Replicate() and b == Replicate():
        return "whole", a, b, Replicate()
    if a == rows:  # keep A's rows where they are; gather B
        return "rows", rows, Replicate(), rows
    if b == cols:  # keep B's columns where they are; gather A
        return "cols", Replicate(), cols, cols
    if a == inner[0] or b == inner[1]:  # one operand is split along k: split the other alike
        return "inner", inner[0], inner[1], Replicate()
    return "whole", Replicate(), Replicate(), Replicate()  # Partial operands are summed first


def _check_operands(name, A, B, dtype, names):
    from . import check_no_grad

    first, second = names
    if not (is_dtensor(A) and is_dtensor(B)):
        raise TypeError(f"{name}: {first} and {second} must both be DTensors or both plain "
                        f"tensors, got {type(A).__name__} and {type(B).__name__}")
    if A.device_mesh != B.device_mesh:
        raise ValueError(f"{name}: {first} and {second} must live on the same device mesh, got "
                         f"{A.device_mesh} and {B.device_mesh}")
    if dtype not in (torch.float64, torch.float32):
        raise TypeError(f"{name}: DTensor operands must be float64 or float32, got {dtype}"
                        + (" (complex DTensors are not supported)" if dtype.is_complex else ""))
    check_no_grad(name, A, B)
    for arg, t in zip(names, (A, B)):
        if t.dtype != dtype:
            raise TypeError(f"{name}: {arg} must be {dtype}, got {t.dtype}")
        if t.dim() != 2:
            raise ValueError(f"{name}: DTensor {arg} must be 2-D, got shape {tuple(t.shape)}")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"{name}: inner dimensions differ: {first} is {tuple(A.shape)} and "
                         f"{second} is {tuple(B.shape)}")


def dtensor_product(name, A, B, dtype, options, names=("A", "B")):
    """The DTensor C = A @ B of 2-D DTensors A and B on one 1-D device mesh; options (an Options)
    are checked here, after the operands; names: A's and B's as the caller's parameters."""
    from torch.distributed.tensor import DTensor

    from . import matmul as distributed_matmul
    from .collectives import RankGroup
    from ..product import real_product

    given = A if is_dtensor(A) else B  # the other may be a plain tensor: refused below
    mesh = given.device_mesh
    if mesh.ndim != 1:  # the mesh is every rank's alike
        raise ValueError(f"{name}: DTensors on a 1-D device mesh are supported, got a "
                         f"{mesh.ndim}-D mesh {tuple(mesh.shape)} (flatten it or use "
                         "ozaki.distributed.matmul on a process group)")
    # a rank that refuses its inputs stops every rank before the redistribution's collectives
    group = RankGroup(mesh.get_group())
    with group.checks_together(name, given.to_local()):
        _check_operands(name, A, B, dtype, names)
        options = Options.checked(name, *options.op_arguments())
        _ops.workspace_bytes()  # OZAKI_WORKSPACE_MB, refused on every rank in this call's name
    # every layout, Replicate x Replicate included, needs the same plan on every rank
    group.check_agree(name, given.to_local().device, dtype=dtype, **options.keywords())
    layout, a_place, b_place, c_place = _targets(A.placements[0], B.placements[0])
    if A.placements[0] != a_place:
        A = A.redistribute(mesh, [a_place])
    if B.placements[0] != b_place:
        B = B.redistribute(mesh, [b_place])
    a, b = A.to_local(), B.to_local()
    if layout == "whole":
        C = real_product(a, b, dtype, options)[0]
    else:
        C = distributed_matmul(a, b, layout, mesh.get_group(), **options.keywords())
    m, n = A.shape[0], B.shape[1]
    return DTensor.from_local(C, mesh, [c_place], run_check=False, shape=torch.Size((m, n)),
                              stride=(max(n, 1), 1))  # a dense tensor's, for n = 0 too
