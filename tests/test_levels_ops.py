"""k-sharded scheme I (csrc/ozaki.cpp): slice_levels of each k-shard, added up in any order, and
round_levels of the sum give exactly the bits of gemm_slices on the whole operands.

A shard holds columns [k0, k1) of a's and bt's rows, with the whole rows' row_stats and the whole
inner dimension total_k; its level sums are exact integers on a fixed grid, so the shards' float64
sum is exact whatever the order. rounding="nearest" returns the entries it cannot decide from the
kept slice products in a mask; elsewhere it is correctly rounded.
"""

import zlib

import pytest
import torch

from helpers import assert_bitwise_equal, cpu_and_cuda, phi_tensor, seeded
from ozaki import _ops

DTYPES = [pytest.param(torch.float64, id="float64"), pytest.param(torch.float32, id="float32")]
#: (m, k, n) of a (m, k) and bt (n, k).
SHAPES = [pytest.param((7, 50, 5), id="7x50x5"), pytest.param((16, 300, 9), id="16x300x9")]
#: (fast, int8) of the slice products.
MODES = [pytest.param(fast, int8, id=f"{'fast' if fast else 'all'}-{'int8' if int8 else 'fp16'}")
         for fast in (True, False) for int8 in (False, True)]
#: Slice counts of every case: coarse (most entries undecided for nearest) to enough for nearly
#: every entry of float64 phi-style rows.
SLICES = [1, 2, 4, 7, 12]


def operands(shape, dtype, kind, seed):
    """Fresh (a, bt) on the CPU: phi-style wide exponents, or small integers (short rows, often
    represented exactly by few slices)."""
    m, k, n = shape
    g = seeded(seed)
    if kind == "phi":
        return phi_tensor((m, k), dtype, g, phi=2.0), phi_tensor((n, k), dtype, g, phi=2.0)

    def draw(rows):
        return torch.randint(-1000, 1001, (rows, k), generator=g).to(dtype)

    return draw(m), draw(n)


def shard_bounds(k):
    """Ways to cut k columns into shards: whole, 2 uneven, 3 uneven with a shard of width 1."""
    third = max(k // 3, 2)
    return [[(0, k)], [(0, third), (third, k)], [(0, third), (third, third + 1), (third + 1, k)]]


def shard_levels(a, bt, stats_a, stats_b, bounds, slices, fast, int8, workspace=0):
    """slice_levels of every shard, with the whole rows' tau and total_k."""
    k = a.shape[1]
    return [_ops.slice_levels(a[:, k0:k1].contiguous(), bt[:, k0:k1].contiguous(), stats_a[0],
                              stats_b[0], slices, fast, int8, k, workspace)
            for k0, k1 in bounds]


def added(parts):
    """The float64 sum of the shards' level sums, in the order given."""
    total = parts[0].clone()
    for part in parts[1:]:
        total += part
    return total


def summed_levels(a, bt, stats_a, stats_b, bounds, slices, fast, int8):
    """The shards' level sums added in two orders, which must agree bitwise (exact sums)."""
    parts = shard_levels(a, bt, stats_a, stats_b, bounds, slices, fast, int8)
    forward, backward = added(parts), added(parts[::-1])
    assert_bitwise_equal(forward, backward)
    return forward


def check_sharded(a, bt, slices, fast, int8):
    """Every cut of k: round_levels of the summed shards is gemm_slices' result (nearest: where
    decided). Returns nearest's undecided mask, the same for every cut (same level sums)."""
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    k = a.shape[1]
    masks = []
    for bounds in shard_bounds(k):
        levels = summed_levels(a, bt, stats_a, stats_b, bounds, slices, fast, int8)
        assert levels.shape == (slices if fast else 2 * slices - 1, a.shape[0], bt.shape[0])
        assert levels.dtype == torch.float64 and levels.device == a.device
        C, undecided = _ops.round_levels(levels, stats_a, stats_b, slices, fast, int8, k, False,
                                         a.dtype)
        assert not undecided.any()
        assert_bitwise_equal(C, _ops.gemm_slices(a, bt, stats_a, stats_b, slices, fast, False,
                                                 int8=int8))
        C, undecided = _ops.round_levels(levels, stats_a, stats_b, slices, fast, int8, k, True,
                                         a.dtype)
        expected = _ops.gemm_slices(a, bt, stats_a, stats_b, slices, fast, True, int8=int8)
        decided = ~undecided
        assert_bitwise_equal(C[decided], expected[decided])
        masks.append(undecided)
    for mask in masks[1:]:
        assert torch.equal(mask, masks[0])
    return masks[0]


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", ["phi", "integer"])
@pytest.mark.parametrize("fast,int8", MODES)
def test_sharded_levels_round_to_gemm_slices(device, dtype, shape, kind, fast, int8):
    seed = zlib.crc32(repr((dtype, shape, kind, fast, int8)).encode())
    a, bt = (x.to(device) for x in operands(shape, dtype, kind, seed))
    for slices in SLICES:
        undecided = check_sharded(a, bt, slices, fast, int8)
        if kind == "integer" and not fast and slices >= 2:
            # two slices capture 11-bit integers whole: every pair kept, nothing left undecided
            assert not undecided.any()
        if slices == SLICES[-1]:
            assert undecided.float().mean().item() <= 0.05


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
def test_one_shard_is_gemm_slices(device, dtype):
    a, bt = (x.to(device) for x in operands((11, 37, 6), dtype, "phi", seed=5))
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    modes = [(1, True, False), (3, False, True), (5, True, True), (6, False, False)]
    for slices, fast, int8 in modes:
        levels = _ops.slice_levels(a, bt, stats_a[0], stats_b[0], slices, fast, int8, 37)
        C, undecided = _ops.round_levels(levels, stats_a, stats_b, slices, fast, int8, 37, False,
                                         dtype)
        assert C.dtype == dtype and undecided.dtype == torch.bool and not undecided.any()
        assert_bitwise_equal(C, _ops.gemm_slices(a, bt, stats_a, stats_b, slices, fast, False,
                                                 int8=int8))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
def test_undecided_entries_are_flagged(device, dtype):
    """Massive cancellation with few fast slices: many entries cannot be decided from the kept
    products, and every entry whose returned value differs from the correctly rounded one is
    flagged (the flags of the sharded and one-shard calls agree)."""
    g = seeded(11)
    m, k, n = 8, 40, 6
    a = phi_tensor((m, k), dtype, g, phi=1.0)
    bt = phi_tensor((n, k), dtype, g, phi=1.0)
    # each row of a is +-x plus a tiny part, against columns that repeat: products cancel to tiny
    a[:, k // 2:] = -a[:, : k // 2] + a[:, : k // 2] * 2.0 ** -30
    bt[:, k // 2:] = bt[:, : k // 2]
    a, bt = a.to(device), bt.to(device)
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    expected = _ops.gemm_slices(a, bt, stats_a, stats_b, 2, True, True)
    bits = {torch.float64: torch.int64, torch.float32: torch.int32}[dtype]
    masks = []
    for bounds in shard_bounds(k):
        levels = summed_levels(a, bt, stats_a, stats_b, bounds, 2, True, False)
        C, undecided = _ops.round_levels(levels, stats_a, stats_b, 2, True, False, k, True, dtype)
        differs = C.view(bits) != expected.view(bits)
        assert differs.any(), "the case must exercise the undecided path"
        assert undecided[differs].all()
        masks.append(undecided)
    for mask in masks[1:]:
        assert torch.equal(mask, masks[0])


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
def test_chunking_does_not_change_the_levels(device, dtype):
    a, bt = (x.to(device) for x in operands((300, 20, 270), dtype, "phi", seed=7))
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    for fast, int8 in [(True, False), (False, True)]:
        whole = _ops.slice_levels(a, bt, stats_a[0], stats_b[0], 3, fast, int8, 20)
        chunked = _ops.slice_levels(a, bt, stats_a[0], stats_b[0], 3, fast, int8, 20, 1)
        assert_bitwise_equal(chunked, whole)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_nonfinite_entries_split_as_zero(device):
    a, bt = (x.to(device) for x in operands((5, 12, 4), torch.float64, "phi", seed=9))
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    special_a, special_bt = a.clone(), bt.clone()
    special_a[1, 3], special_a[2, 0], special_bt[3, 11] = float("nan"), float("inf"), -float("inf")
    zeroed_a, zeroed_bt = a.clone(), bt.clone()
    zeroed_a[1, 3] = zeroed_a[2, 0] = zeroed_bt[3, 11] = 0.0
    levels = _ops.slice_levels(special_a, special_bt, stats_a[0], stats_b[0], 3, False, False, 12)
    assert_bitwise_equal(levels, _ops.slice_levels(zeroed_a, zeroed_bt, stats_a[0], stats_b[0], 3,
                                                   False, False, 12))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
def test_magnitude_product_of_shards_adds_up(device, dtype):
    a, bt = (x.to(device) for x in operands((16, 300, 9), dtype, "phi", seed=13))
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    whole = _ops.magnitude_product(a, bt, stats_a, stats_b)
    for bounds in shard_bounds(300)[1:]:
        parts = [_ops.magnitude_product(a[:, k0:k1].contiguous(), bt[:, k0:k1].contiguous(),
                                        stats_a, stats_b, total_k=300) for k0, k1 in bounds]
        assert_bitwise_equal(added(parts), whole)
        assert_bitwise_equal(added(parts[::-1]), whole)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_empty_products(device):
    tau = lambda rows: torch.zeros(rows, dtype=torch.int32, device=device)  # noqa: E731
    for m, k, n in [(0, 4, 3), (3, 0, 2), (2, 5, 0)]:
        a = torch.ones(m, k, dtype=torch.float64, device=device)
        bt = torch.ones(n, k, dtype=torch.float64, device=device)
        levels = _ops.slice_levels(a, bt, tau(m), tau(n), 3, False, False, max(k, 1))
        assert levels.shape == (5, m, n) and levels.dtype == torch.float64
        assert not levels.any()
        stats_a = (tau(m), tau(m), None)
        stats_b = (tau(n), tau(n), None)
        C, undecided = _ops.round_levels(levels, stats_a, stats_b, 3, False, False, max(k, 1), True,
                                         torch.float32)
        assert C.shape == (m, n) and C.dtype == torch.float32 and not C.any()
        assert undecided.shape == (m, n) and not undecided.any()


@pytest.mark.parametrize("device", cpu_and_cuda())
class TestArgumentErrors:
    def operands(self, device):
        a = torch.ones(3, 8, dtype=torch.float64, device=device)
        bt = torch.ones(2, 8, dtype=torch.float64, device=device)
        return a, bt, _ops.row_stats(a), _ops.row_stats(bt)

    def test_total_k_below_k(self, device):
        a, bt, sa, sb = self.operands(device)
        with pytest.raises(RuntimeError, match=r"slice_levels: total_k .* at least .* k = 8, "
                                               r"got 7"):
            _ops.slice_levels(a, bt, sa[0], sb[0], 2, True, False, 7)
        with pytest.raises(RuntimeError, match=r"total_k .* got 0"):
            _ops.slice_levels(a, bt, sa[0], sb[0], 2, True, False, 0)

    def test_total_k_too_large(self, device):
        a, bt, sa, sb = self.operands(device)
        with pytest.raises(RuntimeError, match=r"total_k = 8388608 is too large for exact FP16"):
            _ops.slice_levels(a, bt, sa[0], sb[0], 2, True, False, 2 ** 23)
        with pytest.raises(RuntimeError, match=r"total_k = 536870912 is too large for exact INT8"):
            _ops.slice_levels(a, bt, sa[0], sb[0], 2, True, True, 2 ** 29)
        levels = _ops.slice_levels(a, bt, sa[0], sb[0], 2, True, False, 8)
        with pytest.raises(RuntimeError, match=r"round_levels: total_k = 8388608 is too large"):
            _ops.round_levels(levels, sa, sb, 2, True, False, 2 ** 23, False, torch.float64)
        with pytest.raises(RuntimeError, match=r"round_levels: total_k .* got 0"):
            _ops.round_levels(levels, sa, sb, 2, True, False, 0, False, torch.float64)

    def test_wrong_level_count(self, device):
        a, bt, sa, sb = self.operands(device)
        levels = _ops.slice_levels(a, bt, sa[0], sb[0], 3, True, False, 8)  # 3 levels
        with pytest.raises(RuntimeError, match=r"levels must hold 5 levels for slices = 3 and "
                                               r"fast = false, got 3"):
            _ops.round_levels(levels, sa, sb, 3, False, False, 8, False, torch.float64)
        with pytest.raises(RuntimeError, match=r"levels must hold 2 levels .* fast = true, got 3"):
            _ops.round_levels(levels, sa, sb, 2, True, False, 8, False, torch.float64)

    def test_wrong_dtypes(self, device):
        a, bt, sa, sb = self.operands(device)
        with pytest.raises(RuntimeError, match=r"slice_levels: a must be float64 or float32, "
                                               r"got Int"):
            _ops.slice_levels(a.int(), bt, sa[0], sb[0], 2, True, False, 8)
        with pytest.raises(RuntimeError, match=r"slice_levels: tau_b must be a contiguous 1-D Int"):
            _ops.slice_levels(a, bt, sa[0], sb[0].long(), 2, True, False, 8)
        with pytest.raises(RuntimeError, match=r"slice_levels: a must be 2-D, got 3-D"):
            _ops.slice_levels(a[None], bt[None], sa[0], sb[0], 2, True, False, 8)
        with pytest.raises(RuntimeError, match=r"slice_levels: slices must be in \[1, 40\], got 0"):
            _ops.slice_levels(a, bt, sa[0], sb[0], 0, True, False, 8)
        levels = _ops.slice_levels(a, bt, sa[0], sb[0], 2, True, False, 8)
        with pytest.raises(RuntimeError, match=r"levels must be a contiguous 3-D float64 .* Float"):
            _ops.round_levels(levels.float(), sa, sb, 2, True, False, 8, False, torch.float64)
        with pytest.raises(RuntimeError, match=r"round_levels: dtype must be float64 or float32, "
                                               r"got Half"):
            _ops.round_levels(levels, sa, sb, 2, True, False, 8, False, torch.float16)
        with pytest.raises(RuntimeError, match=r"round_levels: span_a must be a contiguous 1-D Int "
                                               r"tensor of length 3"):
            torch.ops.ozaki.round_levels(levels, sa[0], sb[0], sa[1][:2], sb[1], 2, True, False, 8,
                                         False, torch.float64)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fast,int8", MODES)
def test_cuda_matches_cpu(dtype, fast, int8):
    a, bt = operands((16, 300, 9), dtype, "phi", seed=17)
    results = {}
    for device in ("cpu", "cuda"):
        x, y = a.to(device), bt.to(device)
        stats_a, stats_b = _ops.row_stats(x), _ops.row_stats(y)
        for slices in (1, 3, 6):
            parts = shard_levels(x, y, stats_a, stats_b, shard_bounds(300)[2], slices, fast, int8)
            levels = added(parts)
            rounded = [_ops.round_levels(levels, stats_a, stats_b, slices, fast, int8, 300, nearest,
                                         dtype) for nearest in (False, True)]
            results[device, slices] = [*parts, levels] + [t for pair in rounded for t in pair]
    for slices in (1, 3, 6):
        for cpu, cuda in zip(results["cpu", slices], results["cuda", slices]):
            assert cuda.device.type == "cuda"
            if cpu.dtype == torch.bool:
                assert torch.equal(cpu, cuda.cpu())
            else:
                assert_bitwise_equal(cuda, cpu)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("fast,int8", MODES)
def test_opcheck(device, fast, int8):
    """torch.library.opcheck (schema, fake kernels of ozaki/library.py, AOT dispatch) of both
    operators; the float32 shard with a larger total_k, rounded to float32 and float64."""
    a, bt = (x.to(device) for x in operands((6, 21, 4), torch.float32, "phi", seed=19))
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    args = (a, bt, stats_a[0], stats_b[0], 3, fast, int8, 40, 0)
    torch.library.opcheck(torch.ops.ozaki.slice_levels, args)
    levels = torch.ops.ozaki.slice_levels(*args)
    for nearest, dtype in [(False, torch.float32), (True, torch.float64)]:
        torch.library.opcheck(torch.ops.ozaki.round_levels,
                              (levels, stats_a[0], stats_b[0], stats_a[1], stats_b[1], 3, fast,
                               int8, 40, nearest, dtype))
