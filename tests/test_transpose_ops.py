"""ozaki::transposed (csrc/cpu/transpose.cpp, csrc/cuda/transpose.cu): b.mT.contiguous() bit for bit,
for any shape and strides, always a fresh tensor; and ozaki/product.py's row_operands, which copies
B with it on CUDA."""

import pytest
import torch

from helpers import assert_bitwise_equal, cpu_and_cuda, phi_tensor, seeded
from ozaki import _ops
from ozaki.product import row_operands

DTYPES = [pytest.param(torch.float64, id="float64"), pytest.param(torch.float32, id="float32")]
#: (k, n) or (batch, k, n): tile-sized, one short and one past a tile, many tiles, a batch.
SHAPES = [(1, 1), (31, 33), (32, 32), (33, 65), (257, 1000), (1, 40), (40, 1), (3, 70, 45),
          (1, 33, 31)]


def fresh(shape, dtype, device, seed=0):
    """Fresh nonzero values of varied magnitudes, drawn on the CPU."""
    return phi_tensor(tuple(shape), dtype, seeded(seed), phi=4.0).to(device)


def check(b):
    out = _ops.transposed(b)
    assert out.is_contiguous()
    assert out.device == b.device
    assert_bitwise_equal(out, b.mT.contiguous())
    return out


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_torch_copy(device, dtype, shape):
    b = fresh(shape, dtype, device, seed=sum(shape))
    assert (b != 0).all()
    check(b)


#: Views of a fresh base tensor: rows or columns sliced (an offset and strides other than the
#: sizes'), strided along n, transposes of row-major tensors (whose copy is a plain one), a batch
#: whose elements are not outermost in memory.
VIEWS = {
    "row-slice": ((70, 45), lambda x: x[::2]),
    "column-slice": ((70, 45), lambda x: x[5:60, 3:40]),
    "strided-along-n": ((70, 45), lambda x: x[:, ::3]),
    "transposed": ((45, 70), lambda x: x.mT),
    "batch-transposed": ((3, 45, 70), lambda x: x.mT),
    "batch-slice": ((5, 40, 50), lambda x: x[1::2, 2:, :47]),
    "batch-permuted": ((40, 3, 50), lambda x: x.permute(1, 0, 2)),
    "expanded": ((1, 33, 35), lambda x: x.expand(3, 33, 35)),
}


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("view", list(VIEWS))
def test_non_contiguous_inputs(device, dtype, view):
    shape, make = VIEWS[view]
    b = make(fresh(shape, dtype, device, seed=7))
    assert not b.is_contiguous()
    check(b)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0, 0), (0, 3, 4), (2, 0, 3), (2, 3, 0)],
                         ids=lambda s: "x".join(map(str, s)))
def test_empty(device, dtype, shape):
    b = torch.empty(shape, dtype=dtype, device=device)
    out = check(b)
    assert out.shape == (*shape[:-2], shape[-1], shape[-2])


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_special_values_keep_their_bits(device):
    """NaN payloads, signed zeros, infinities and subnormals are copied, not converted."""
    values = torch.tensor([float("nan"), -0.0, 0.0, float("inf"), -float("inf"), 5e-324, -1.5],
                          dtype=torch.float64)
    b = values.repeat(9 * 11)[:9 * 11].reshape(9, 11)
    b.view(torch.int64)[0, 0] = 0x7FF0_0000_0000_0123  # a NaN with a payload
    check(b.to(device))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("shape", [(70000, 1, 2), (2 * 65535 * 32 + 40, 2)],
                         ids=["batch-over-65535", "row-tiles-over-65535"])
def test_past_the_grid_limits(device, shape):
    """More batch elements or 32-row tiles than a grid's y and z dimensions hold (the CUDA kernel
    loops over the rest)."""
    b = torch.randn(shape, dtype=torch.float64, generator=seeded(3)).to(device)  # fast to draw
    assert (b != 0).all()
    check(b)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_returns_a_fresh_tensor(device):
    """Even when b.mT is already contiguous (no copy is needed) the result does not alias b."""
    x = fresh((6, 9), torch.float64, device)
    out = check(x.mT)
    assert out.data_ptr() != x.data_ptr()
    before = x.clone()
    out.zero_()
    assert_bitwise_equal(x, before)


ERRORS = [
    pytest.param(lambda: torch.ones(4, 3, dtype=torch.int32),
                 "ozaki::transposed: b must be float64 or float32, got Int", id="int32"),
    pytest.param(lambda: torch.ones(4, 3, dtype=torch.float16),
                 "ozaki::transposed: b must be float64 or float32, got Half", id="float16"),
    pytest.param(lambda: torch.ones(4, dtype=torch.float64),
                 "ozaki::transposed: b must be 2-D (k, n) or 3-D (batch, k, n), got 1-D of shape "
                 "[4]", id="1-D"),
    pytest.param(lambda: torch.ones(2, 2, 3, 4, dtype=torch.float64),
                 "ozaki::transposed: b must be 2-D (k, n) or 3-D (batch, k, n), got 4-D of shape "
                 "[2, 2, 3, 4]", id="4-D"),
]


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("make,message", ERRORS)
def test_errors(device, make, message):
    with pytest.raises(RuntimeError) as info:
        _ops.transposed(make().to(device))
    assert message in str(info.value)


# ---- row_operands -------------------------------------------------------------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("shape", [(33, 65), (3, 70, 45)], ids=["2-D", "batched"])
def test_row_operands_copy_b_by_columns(device, shape):
    """A row-major B is copied to columns as rows: the bits of B.mT.contiguous()."""
    A = fresh((*shape[:-2], 5, shape[-2]), torch.float64, device, seed=1)
    B = fresh(shape, torch.float64, device, seed=2)
    a, bt = row_operands(A, B)
    assert a.is_contiguous() and bt.is_contiguous()
    assert_bitwise_equal(a, A)
    assert_bitwise_equal(bt, B.mT.contiguous())


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_row_operands_keep_a_transposed_b(device):
    """B = X.mT of a row-major X needs no copy: bt is X itself."""
    X = fresh((2, 7, 11), torch.float64, device)
    _, bt = row_operands(fresh((2, 4, 11), torch.float64, device), X.mT)
    assert bt.data_ptr() == X.data_ptr() and bt.stride() == X.stride()
