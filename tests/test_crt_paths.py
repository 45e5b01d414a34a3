"""Scheme II's CUDA paths (docs/algorithm.md, "Scheme II paths"): cuBLAS INT8 GEMMs per modulus
with the INT32 products in memory, the fused kernel that keeps their residues on chip, and the
reduced GEMMs whose epilogue writes each product's residue as a byte. Every path gives the CPU's
bits, on shapes that end inside a 128 x 64 or 128 x 256 tile, a warp's 32 x 32 block or a k
stage, with NaN/Inf rows, in batches and under workspace chunking; exact scheme II too."""

import os
import subprocess
import sys

import pytest
import torch

import ozaki
from ozaki import _ops, accuracy, crt
from helpers import assert_bitwise_equal, cpu_and_cuda, crt_paths, phi_tensor, seeded

# (m, k, n): single entries, sides around the 32-row warp blocks, the 128 x 64 and 128 x 256 tiles
# (and the reduced path's switch between them at 256 columns), k around the 128-byte stages and the
# 16-byte padding, one side small, k past a few stages
SHAPES = [(1, 1, 1), (7, 33, 5), (64, 64, 64), (65, 100, 129), (127, 200, 63), (128, 1000, 64),
          (129, 16, 65), (300, 17, 200), (40, 5000, 70), (1000, 300, 3), (3, 130, 1000),
          (256, 129, 192), (130, 384, 66), (257, 260, 513), (128, 128, 256), (255, 40, 257),
          (300, 70, 255)]
MODULI = [1, 2, 7, 15, 16]


def operands(batch, m, k, n, dtype, seed, specials=True):
    """phi = 1 operands; one row of A and one column of B hold NaN and Inf when specials."""
    g = seeded(seed)
    A = phi_tensor((*batch, m, k), dtype, g, 1.0)
    B = phi_tensor((*batch, k, n), dtype, g, 1.0)
    if specials and m > 1 and n > 1:
        A[..., m // 2, k // 2] = float("nan")
        B[..., k - 1, n - 1] = float("inf")
    return A, B


def product(A, B, moduli, path, device, monkeypatch):
    monkeypatch.setenv("OZAKI_CRT_PATH", path)
    gemm = ozaki.dgemm if A.dtype == torch.float64 else ozaki.sgemm
    if A.dim() == 2:
        return gemm(A.to(device), B.to(device), backend="crt", moduli=moduli).cpu()
    return ozaki.matmul(A.to(device), B.to(device), backend="crt", moduli=moduli).cpu()


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("moduli", MODULI)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_path_gives_the_cpu_bits(shape, moduli, dtype, monkeypatch):
    m, k, n = shape
    moduli = max(moduli, crt.smallest_moduli(k))  # fewer cannot hold a scaled product of k terms
    A, B = operands((), m, k, n, dtype, seed=m + 3 * k + 7 * n + moduli)
    expected = product(A, B, moduli, "cublas", "cpu", monkeypatch)
    assert expected.isfinite().any()
    for path in crt_paths():
        assert_bitwise_equal(product(A, B, moduli, path, "cuda", monkeypatch), expected)


@pytest.mark.cuda
@pytest.mark.parametrize("batch,shape", [((3,), (70, 45, 130)), ((5,), (1, 300, 1)),
                                         ((2, 2), (33, 64, 17))])
def test_batches_give_the_cpu_bits(batch, shape, monkeypatch):
    A, B = operands(batch, *shape, torch.float64, seed=sum(shape))
    expected = product(A, B, 15, "cublas", "cpu", monkeypatch)
    for path in crt_paths():
        assert_bitwise_equal(product(A, B, 15, path, "cuda", monkeypatch), expected)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype,moduli", [(torch.float64, 15), (torch.float32, 8)],
                         ids=["float64", "float32"])
def test_threads_that_rebuild_several_groups_of_entries(dtype, moduli, monkeypatch):
    """2 x 2900 x 2901 entries: more groups of four than the reconstruction's grid has threads,
    so each thread rebuilds several (on the reduced path, each block many tiles of 8 rows whose
    shared slots are refilled by tensor copies, parity after parity), across the batch's elements,
    past the last row tile (2900 = 8 * 362 + 4) and column (2901 = 4 * 725 + 1) and through the
    NaN row and Inf column: every path gives the cuBLAS path's bits, and rows of it
    the CPU's (with a fixed moduli count an entry depends on its row and column only)."""
    A, B = operands((2,), 2900, 16, 2901, dtype, seed=29)
    A, B = A.cuda(), B.cuda()
    expected = product(A, B, moduli, "cublas", "cuda", monkeypatch)
    for path in crt_paths():
        assert_bitwise_equal(product(A, B, moduli, path, "cuda", monkeypatch), expected)
    rows = [0, 1, 1450, 2899]  # 1450: the row holding NaN
    assert_bitwise_equal(product(A[:, rows], B, moduli, "cublas", "cpu", monkeypatch),
                         expected[:, rows])
    assert expected[:, rows].isnan().any() and expected.isfinite().any()


@pytest.mark.cuda
def test_more_row_tiles_than_a_grid_side_holds(monkeypatch):
    """65535 * 128 + 100 rows: more 128-row tiles than grid y holds (the kernel loops past it);
    the fused path gives the cuBLAS path's bits (both exact, and both match the CPU above)."""
    A, B = operands((), 65535 * 128 + 100, 8, 3, torch.float64, seed=6)
    A, B = A.cuda(), B.cuda()
    fused = product(A, B, 15, "fused", "cuda", monkeypatch)
    assert_bitwise_equal(fused, product(A, B, 15, "cublas", "cuda", monkeypatch))
    assert fused[-100:].isfinite().any()


@pytest.mark.cuda
def test_workspace_chunks_give_the_same_bits(monkeypatch):
    """A 1 MiB workspace splits every path's residues (and products) into many chunks of rows and
    columns."""
    A, B = operands((), 300, 520, 260, torch.float64, seed=5)
    whole = product(A, B, 15, "cublas", "cpu", monkeypatch)
    monkeypatch.setenv("OZAKI_WORKSPACE_MB", "1")
    for path in crt_paths():
        assert_bitwise_equal(product(A, B, 15, path, "cuda", monkeypatch), whole)


@pytest.mark.cuda
def test_large_reconstructions_give_the_cublas_paths_bits_in_every_entry(monkeypatch):
    """16384 x 16 x 16384 in one chunk: the reduced path's reconstruction of 2^18 tiles, each
    block refilling its two shared slots by tensor copies over a hundred times. Three calls in a
    row equal the cuBLAS path's result (rebuilt from INT32 sums without tensor copies) in every
    entry. Without a proxy fence between the warps' reads of a slot and the copy that refills it,
    a few warp rows of 128 entries per call took another tile's residues: finite, plausible and
    wrong, and different from call to call."""
    if "reduced" not in crt_paths():
        pytest.skip("this build or GPU has no reduced residue GEMM")
    g = seeded(16)
    A = phi_tensor((16384, 16), torch.float64, g, 0.5).cuda()
    B = phi_tensor((16, 16384), torch.float64, g, 0.5).cuda()
    expected = product(A, B, 15, "cublas", "cuda", monkeypatch)
    for _ in range(3):
        assert_bitwise_equal(product(A, B, 15, "reduced", "cuda", monkeypatch), expected)


@pytest.mark.cuda
@pytest.mark.parametrize("waves", ["1", "0"], ids=["wave-plan", "memory-plan"])
@pytest.mark.parametrize("case", [(2048, 256, 3000, 22), (1536, 256, 1536, 34)],
                         ids=lambda c: "x".join(map(str, c[:3])))
def test_wave_planned_row_launches_give_the_cpu_bits(case, waves, monkeypatch):
    """Budgets (MiB) under which the reduced path keeps all of A's residues but not all of B's
    columns. On 132 multiprocessors (H100, H200) the wave plan (csrc/tile_waves.h) runs chunks of
    768 columns of the 3000 (the last 696) or all 1536, each in GEMM launches of 1024 rows (the
    last of 512 of the 1536), reading rows of A's whole residues, computed or prepared;
    OZAKI_TILE_WAVES=0 keeps the memory plan's chunks of 384 and 768 columns, all rows at once.
    All give the CPU's bits."""
    if "reduced" not in crt_paths():
        pytest.skip("this build or GPU has no reduced residue GEMM")
    m, k, n, budget = case
    A, B = operands((), m, k, n, torch.float64, seed=m + n)
    expected = product(A, B, 15, "cublas", "cpu", monkeypatch)
    monkeypatch.setenv("OZAKI_WORKSPACE_MB", str(budget))
    monkeypatch.setenv("OZAKI_TILE_WAVES", waves)
    A, B = A.cuda(), B.cuda()
    assert_bitwise_equal(product(A, B, 15, "reduced", "cuda", monkeypatch), expected)
    with ozaki.prepare(A):
        for _ in range(2):
            assert_bitwise_equal(product(A, B, 15, "reduced", "cuda", monkeypatch), expected)


@pytest.mark.cuda
@pytest.mark.parametrize("waves", ["1", "0"], ids=["wave-plan", "memory-plan"])
@pytest.mark.parametrize("rounding, budget", [(None, 30), ("nearest", 48)],
                         ids=["wide", "exact"])
def test_rows_of_wide_span_in_column_chunks_give_the_cpu_bits(rounding, budget, waves,
                                                              monkeypatch):
    """Rows of wide span (every seventh column of A times 2^40, every fifth row of B times
    2^-35, on phi = 1 data): wide scheme II with 18 moduli, and exact scheme II with 30
    (correctly rounded), under budgets (MiB) where the reduced path keeps A's residues whole and
    takes B's 3000 columns in chunks of about 512, in the wave plan's launches or the memory
    plan's: the CPU's bits, and correctly rounded entries where asked."""
    if "reduced" not in crt_paths():
        pytest.skip("this build or GPU has no reduced residue GEMM")
    A, B = operands((), 2048, 256, 3000, torch.float64, seed=7)
    A[:, ::7] *= 2.0 ** 40
    B[::5, :] *= 2.0 ** -35
    plan = ozaki.plan(A, B, rounding=rounding)
    assert plan.backend == "crt" and plan.moduli == (30 if rounding else 18), str(plan)
    expected = ozaki.dgemm(A, B, rounding=rounding)
    monkeypatch.setenv("OZAKI_CRT_PATH", "reduced")
    monkeypatch.setenv("OZAKI_WORKSPACE_MB", str(budget))
    monkeypatch.setenv("OZAKI_TILE_WAVES", waves)
    got = ozaki.dgemm(A.cuda(), B.cuda(), rounding=rounding).cpu()
    assert_bitwise_equal(got, expected)
    if rounding == "nearest":
        rows, cols = slice(1000, 1008), slice(2980, 2990)  # in the last chunk, finite
        exact = accuracy.round_exact(accuracy.exact_matmul(A[rows], B[:, cols]))
        assert_bitwise_equal(got[rows, cols], exact)


@pytest.mark.cuda
def test_tile_waves_setting_other_than_0_or_1_is_named(monkeypatch):
    if "reduced" not in crt_paths():
        pytest.skip("this build or GPU has no reduced residue GEMM")
    A, B = operands((), 30, 64, 60, torch.float64, seed=1)
    monkeypatch.setenv("OZAKI_TILE_WAVES", "yes")
    with pytest.raises(RuntimeError, match="OZAKI_TILE_WAVES must be 0 or 1, got 'yes'"):
        product(A.cuda(), B.cuda(), 15, "reduced", "cuda", monkeypatch)


@pytest.mark.cuda
@pytest.mark.parametrize("moduli", [1, 16, 17, 29, 40])
@pytest.mark.parametrize("shape", [(1, 1, 1), (129, 300, 257), (300, 17, 5), (64, 1000, 520)],
                         ids=lambda s: "x".join(map(str, s)))
def test_exact_scheme_two_gives_the_cpu_bits_on_every_path(shape, moduli, monkeypatch):
    """ozaki::gemm_crt_exact with up to 40 moduli (more than scheme II's 16), NaN/Inf rows
    included; too few moduli give wrong integers, the same on every path."""
    m, k, n = shape
    A, B = operands((), m, k, n, torch.float64, seed=m + k + n + moduli)
    a, bt = A.contiguous(), B.t().contiguous()

    def exact(device):
        x, y = a.to(device), bt.to(device)
        stats_x, stats_y = ozaki._ops.row_stats(x), ozaki._ops.row_stats(y)
        return ozaki._ops.gemm_crt_exact(x, y, stats_x, stats_y, moduli).cpu()

    monkeypatch.delenv("OZAKI_CRT_PATH", raising=False)
    expected = exact("cpu")
    for path in crt_paths():
        monkeypatch.setenv("OZAKI_CRT_PATH", path)
        assert_bitwise_equal(exact("cuda"), expected)


@pytest.mark.cuda
def test_default_plan_takes_the_same_bits_on_every_path(monkeypatch):
    """The planned scheme-II product (no moduli given) does not depend on the path either."""
    A, B = operands((), 200, 3000, 150, torch.float64, seed=9, specials=False)
    results = [product(A, B, None, path, "cuda", monkeypatch) for path in crt_paths()]
    for result in results[1:]:
        assert_bitwise_equal(result, results[0])


def magnitude_on(device, A, B, seed):
    """ozaki::crt_magnitude (scheme II's plan estimate) of A @ B (a matrix or a batch) on device,
    from the CPU's row statistics and norm scales, with a random third of the rows of each side
    made unusable and the smallest entry put in the last row and column (the tile edges) of every
    element, where the operands allow."""
    m, k, n = A.shape[-2], A.shape[-1], B.shape[-1]
    A, B = A.clone(), B.clone()
    if m > 1 and n > 1:
        A[..., -1, :] = 0.0
        A[..., -1, 0] = 1.0
        B[..., 0, :] = 1.0
        B[..., 0, -1] = 0.125
    a, bt = A.contiguous(), B.mT.contiguous()
    g = seeded(seed)
    vectors = []
    for x in (a, bt):
        rows = x.reshape(-1, k)
        stats = _ops.row_stats(rows)
        kept = torch.rand(rows.shape[0], generator=g) > 1 / 3
        kept[-1] = True
        vectors += [stats, _ops.row_norm_scales(rows, stats[0]), stats.usable & kept]
    stats_a, norm_a, use_a, stats_b, norm_b, use_b = (
        _ops.RowStats(t.to(device) for t in v) if isinstance(v, tuple) else v.to(device)
        for v in vectors)
    return _ops.crt_magnitude(a.to(device), bt.to(device), stats_a, stats_b, norm_a, norm_b,
                              use_a, use_b).cpu()


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [(), (3,)], ids=["matrix", "batch"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_plan_estimate_gives_the_cpu_value(shape, batch):
    """The estimate's smallest digit product (on the reduced GEMM, a minimum kept per tile where
    this build and GPU have it) is the CPU's, at every tile edge, with unusable rows."""
    m, k, n = shape
    A, B = operands(batch, m, k, n, torch.float64, seed=m + k + n, specials=False)
    expected = magnitude_on("cpu", A, B, seed=k)
    assert 0 < expected.item() < float("inf")
    assert_bitwise_equal(magnitude_on("cuda", A, B, seed=k), expected)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("batch", [(), (3,)], ids=["matrix", "batch"])
@pytest.mark.parametrize("shape", [(1, 7, 1), (37, 130, 65), (129, 33, 257), (4, 1024, 3),
                                   (9, 1025, 5), (3, 2048, 2), (6, 2049, 4), (5, 4096, 3),
                                   (4, 4097, 2), (5, 6200, 3), (3, 8192, 2), (3, 8193, 2),
                                   (700, 8300, 3), (3, 66000, 2)],
                         ids=lambda s: "x".join(map(str, s)))
def test_the_plan_reads_in_one_call_are_their_parts(shape, batch, dtype, device):
    """ozaki::crt_plan_reads returns, bit for bit, what its parts return called one by one: the
    rows' statistics and norm scales, their usable rows, and -crt_magnitude with both operands'
    crt_row_bounds (on CUDA these are fused: a pass per operand, with the estimate's digits, the
    minimum GEMM, one kernel for the values); rows with NaN/Inf and zero rows included, and the
    CUDA reads equal the CPU's. On CUDA, rows of up to 8192 entries are held in registers (1024,
    1025, 2048, 2049, 4096, 4097, 8192 and 8193 sit at the edges of its four block sizes and of its
    reach);
    on a GPU of 132 multiprocessors (H100, H200), 700 float64 rows of 8300 take fewer blocks than
    rows (each block loops over rows, so that their rows stay in L2), and float64 rows of 66000
    get their digits from a pass of their own."""
    m, k, n = shape
    A, B = operands(batch, m, k, n, dtype, seed=m * k + n)
    if m > 1:
        A[..., 0, :] = 0.0  # a zero row: not usable
    a, bt = A.contiguous().to(device), B.mT.contiguous().to(device)
    stats_a, norm_a, stats_b, norm_b, values = _ops.crt_plan_reads(a, bt)
    parts = []
    for x, stats, norm in ((a, stats_a, norm_a), (bt, stats_b, norm_b)):
        expected_stats, expected_norm = _ops.row_stats_with_norm_scales(x.reshape(-1, k))
        for got, expected in zip((*stats, norm, stats.usable),
                                 (*expected_stats, expected_norm, expected_stats.usable)):
            assert got.dtype == expected.dtype and torch.equal(got, expected)
        parts.append(_ops.crt_row_bounds(expected_stats, expected_norm))
    magnitude = _ops.crt_magnitude(a, bt, stats_a, stats_b, norm_a, norm_b, stats_a.usable,
                                   stats_b.usable)
    assert_bitwise_equal(values, torch.cat([-magnitude.reshape(1), *parts]))
    assert stats_a.usable[0] == (m == 1) and stats_a.usable.any() and stats_b.usable.any()
    if device != "cpu":
        *cpu_reads, cpu_values = _ops.crt_plan_reads(a.cpu(), bt.cpu())
        assert_bitwise_equal(values.cpu(), cpu_values)
        for got, expected in zip((stats_a, norm_a, stats_b, norm_b), cpu_reads):
            for g, e in zip(got if isinstance(got, tuple) else (got,),
                            expected if isinstance(expected, tuple) else (expected,)):
                assert torch.equal(g.cpu(), e)


# crt_plan_reads of the operands saved at argv[1], on CUDA, its tensors saved to argv[2]
_PLAN_READS_IN_A_CHILD = """
import sys, torch
from ozaki import _ops
operands = torch.load(sys.argv[1])
reads = _ops.crt_plan_reads(operands["a"].cuda(), operands["bt"].cuda())
torch.save([t.cpu() for r in reads for t in (r if isinstance(r, tuple) else (r,))], sys.argv[2])
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the row launch is CUDA's")
def test_the_plan_reads_do_not_depend_on_the_row_launch(tmp_path):
    """OZAKI_ROW_PASS_L2_MB=0 (a block of 256 threads per row) gives the reads of the default
    launch (long rows a few at a time, looping) bit for bit; a value that is not an integer from 0
    to 2^20 is refused with the variable and the value named."""
    g = seeded(71)
    a = phi_tensor((700, 8300), torch.float64, g, 1.0).cuda()
    bt = phi_tensor((3, 8300), torch.float64, g, 1.0).cuda()
    a[5, 7] = float("nan")
    inputs, outputs = tmp_path / "inputs.pt", tmp_path / "reads.pt"
    torch.save({"a": a.cpu(), "bt": bt.cpu()}, inputs)
    child = [sys.executable, "-c", _PLAN_READS_IN_A_CHILD, str(inputs), str(outputs)]
    run = subprocess.run(child, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OZAKI_ROW_PASS_L2_MB": "0"})
    assert run.returncode == 0, run.stderr
    here = _ops.crt_plan_reads(a, bt)
    expected = [t for r in here for t in (r if isinstance(r, tuple) else (r,))]
    got = torch.load(outputs)
    assert len(got) == len(expected) == 9
    for g_t, want in zip(got, expected):
        if want.is_floating_point():
            assert_bitwise_equal(g_t, want.cpu())
        else:
            assert g_t.dtype == want.dtype and torch.equal(g_t, want.cpu())
    for bad in ("x", "-1", "2000000", "64MB"):
        run = subprocess.run(child, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "OZAKI_ROW_PASS_L2_MB": bad})
        assert run.returncode != 0
        assert (f"OZAKI_ROW_PASS_L2_MB must be an integer from 0 to 1048576 (MiB), got '{bad}'"
                in run.stderr), run.stderr


@pytest.mark.parametrize("p", crt.EXACT_MODULI)
def test_the_reduced_epilogues_long_division_is_exact(p):
    """csrc/cuda/reduced_gemm.cuh, ModulusDivisor's long form (k above 65535), in the device's
    32-bit integer widths: x = sum + offset in [0, 2^32), the fold
    t = x + (x >> 16) ((2^16 mod p) - 2^16) (modulo 2^32) is the true value
    (x >> 16) (2^16 mod p) + (x & 0xffff) below 2^24, and t - floor(t ceil(2^32 / p) / 2^32) p
    (added as a multiple of 2^32 - p) is sum mod p, for every modulus, at the ends of the range,
    around multiples of 2^16 and of p near them, and on random sums."""
    bound = 2 ** 31 - 2 ** 14  # |sum| of exact INT8 products with k < 2^17
    offset = -(-bound // p) * p
    fold = (2 ** 16 % p - 2 ** 16) % 2 ** 32
    magic = -(-2 ** 32 // p)
    assert offset < 2 ** 32 and magic < 2 ** 32
    g = torch.Generator().manual_seed(p)
    sums = torch.randint(-bound + 1, bound, (2000,), generator=g).tolist()
    for edge in (-bound + 1, -offset + 2 ** 16, 0, 2 ** 16, bound - 1):
        sums += [edge + d for d in range(-p - 1, p + 2)]
    for s in sums:
        if abs(s) >= bound:
            continue
        x = (s + offset) % 2 ** 32  # the device's uint32 sum
        assert x == s + offset
        t = (x + (x >> 16) * fold) % 2 ** 32
        assert t == (x >> 16) * (2 ** 16 % p) + (x & 0xFFFF) < 2 ** 24
        quotient = t * magic >> 32  # __umulhi
        remainder = (t + quotient * (2 ** 32 - p)) % 2 ** 32  # the multiply-add by 2^32 - p
        assert remainder == s % p < p


# ModulusDivisor's short form covers k up to kShortSumInner = (2^31 - 256) >> 15
SHORT_SUM_INNER = (2 ** 31 - 256) >> 15


@pytest.mark.parametrize("k", [1, 16, 1024, 4096, SHORT_SUM_INNER])
@pytest.mark.parametrize("p", crt.EXACT_MODULI)
def test_the_reduced_epilogues_short_division_is_exact(p, k):
    """ModulusDivisor's short form, for sums of k exact INT8 products (|sum| <= k 2^14): x = sum +
    offset (the least multiple of p at least k 2^14) lies in [0, 2^31), and with p in
    (2^s, 2^(s + 1)], x - floor(x ceil(2^(32 + s) / p) / 2^(32 + s)) p (added as a multiple of
    2^32 - p) is sum mod p, at the ends of the range, around multiples of p and on random
    sums."""
    bound = k * 2 ** 14
    offset = -(-bound // p) * p
    shift = (p - 1).bit_length() - 1
    assert 2 ** shift < p <= 2 ** (shift + 1)
    magic = -(-2 ** (32 + shift) // p)
    assert magic < 2 ** 32 and bound + offset < 2 ** 31
    g = torch.Generator().manual_seed(p + k)
    sums = torch.randint(-bound, bound + 1, (2000,), generator=g).tolist()
    for edge in (-bound, -bound // 2, 0, bound // 3, bound):
        sums += [edge + d for d in range(-p - 1, p + 2)]
    for s in sums:
        if abs(s) > bound:
            continue
        x = s + offset  # the device's uint32 sum, below 2^31
        assert 0 <= x < 2 ** 31
        quotient = (x * magic % 2 ** 64 >> 32) >> shift  # __umulhi, then the shift
        remainder = (x + quotient * (2 ** 32 - p)) % 2 ** 32  # the multiply-add by 2^32 - p
        assert remainder == s % p < p


@pytest.mark.cuda
@pytest.mark.parametrize("k", [SHORT_SUM_INNER - 15, SHORT_SUM_INNER + 2])
def test_the_reduced_path_on_either_side_of_the_short_sums(k, monkeypatch):
    """k padded to 65520 takes the reduced epilogue's short division, 65552 its long one: both
    give the CPU's bits (and the cuBLAS path's)."""
    moduli = max(15, crt.smallest_moduli(k))
    A, B = operands((), 5, k, 7, torch.float64, seed=k)
    expected = product(A, B, moduli, "cublas", "cpu", monkeypatch)
    assert expected.isfinite().any()
    for path in crt_paths():
        assert_bitwise_equal(product(A, B, moduli, path, "cuda", monkeypatch), expected)


@pytest.mark.cuda
def test_an_unknown_path_is_named(monkeypatch):
    A, B = operands((), 4, 5, 3, torch.float64, seed=1)
    with pytest.raises(RuntimeError,
                       match="OZAKI_CRT_PATH must be cublas, fused or reduced, got 'tiles'"):
        product(A, B, 3, "tiles", "cuda", monkeypatch)
