"""B's columns read in place (docs/algorithm.md, "B's columns in place"): on CUDA the plan's reads
(ozaki::crt_plan_reads for the default plan; row_stats_with_norm_scales and the fixed-count check's
sampled_magnitudes for a fixed moduli count) and scheme II's truncated product (ozaki::gemm_crt)
take bt = B.mT of a contiguous B without copying its columns into rows, and give the bits of the
copied rows and of the CPU: on every path and moduli count, at the edges of the column tiles (32
columns by 64 entries for the residues; for the reads, groups of 4, 8 or 16 columns and digit
chunks of 1024, 1024 or 512 entries), in batches whose elements' columns meet inside a group, with
NaN/Inf columns, and where k is too long for the column pass to keep its columns in L2 (then every
sweep reads them from memory)."""

import pytest
import torch

import ozaki
from ozaki import _ops, crt, product
from ozaki.options import Options
from helpers import assert_bitwise_equal, crt_paths
from test_crt_paths import operands as crt_path_operands

# (m, k, n): two columns (one column's B.mT is contiguous: rows already), columns around the
# 4-column groups and 32-column tiles, k around the 64-entry tiles, the 16-byte row padding and
# the 1024-entry digit chunks (up to four of them), long columns, and k past the length whose
# columns the column pass keeps in L2 on a GPU of 132 multiprocessors (15888 in float64, 31776 in
# float32)
SHAPES = [(1, 2, 3), (5, 7, 3), (9, 64, 8), (33, 65, 9), (70, 100, 31), (40, 513, 33),
          (65, 1000, 63), (3, 520, 257), (129, 2000, 100), (12, 3001, 37), (6, 4096, 20),
          (17, 8200, 40), (9, 16000, 35), (5, 32000, 6)]
# The plan's reads of many columns, which the column pass reads in groups of 16 or 8 (whole lines
# of B) on a GPU of 132 multiprocessors: 16 where n >= 1569 and k <= 3971 in float64 (7943 in
# float32), else 8 where n >= 785 and k fits L2 at 8 columns; a partial last group (n = 1601,
# 1700), digit chunks of 512 entries (k = 515, 1000, 2048) and of 1024 (k = 4100, 8 columns).
WIDE_GROUP_SHAPES = [(5, 1000, 1601), (3, 2048, 2048), (4, 4100, 1000), (3, 515, 1700)]
# Columns too long for L2 and enough of them for groups of 16 (whole lines, every sweep from memory)
# in float64, and in float32 for k = 32000.
LONG_WIDE_SHAPES = [(2, 16000, 1601), (2, 32000, 1600)]


def scales(stats_a, norm_a, stats_b, norm_b, moduli, k):
    """Truncated scheme II's row scale codes of a and bt for `moduli` moduli."""
    t_a, t_b = crt.scale_bits(moduli, k)
    return _ops.crt_row_scales(norm_a, stats_a, t_a), _ops.crt_row_scales(norm_b, stats_b, t_b)


def operands(batch, m, k, n, dtype, seed, specials=True):
    """phi = 1 operands on CUDA, B contiguous; one row of A and one column of B hold NaN and Inf
    (and one column of B is zero) when specials."""
    specials = specials and m > 1 and n > 2
    A, B = crt_path_operands(batch, m, k, n, dtype, seed, specials)
    if specials:
        B[..., :, 0] = 0.0
    return A.cuda(), B.cuda().contiguous()


def as_column_view(B):
    """bt = B.mT, B's columns in place (what product.in_place_bt hands the operators)."""
    bt = B.mT
    assert not bt.is_contiguous() and bt.data_ptr() == B.data_ptr()
    return bt


def every_column_pass(test):
    """test over both dtypes, a matrix and a batch, and shapes that reach every configuration of
    the column pass (on CUDA)."""
    test = pytest.mark.parametrize("shape", SHAPES + WIDE_GROUP_SHAPES + LONG_WIDE_SHAPES,
                                   ids=lambda s: "x".join(map(str, s)))(test)
    test = pytest.mark.parametrize("batch", [(), (3,)], ids=["matrix", "batch"])(test)
    test = pytest.mark.parametrize("dtype", [torch.float64, torch.float32],
                                   ids=["float64", "float32"])(test)
    return pytest.mark.cuda(test)


def assert_zero_and_inf_columns_unusable(stats_b, batch, m, n):
    """Of operands() B's columns, the zero column and the Inf column are not usable, the others
    are (where there are rows and columns enough)."""
    if m > 1 and n > 2:
        usable = stats_b.usable.reshape(*batch, n)
        assert not usable[..., 0].any() and not usable[..., -1].any() and usable[..., 1].all()


@every_column_pass
def test_the_plan_reads_of_columns_are_those_of_rows(shape, batch, dtype):
    """ozaki::crt_plan_reads of B's columns in place returns, bit for bit, what it returns for
    the same columns copied into rows: statistics, norm scales, usable flags and the values
    (whose estimate is the minimum over the digits each pass wrote)."""
    m, k, n = shape
    A, B = operands(batch, m, k, n, dtype, seed=m + 3 * k + 5 * n)
    in_place = _ops.crt_plan_reads(A, as_column_view(B))
    copied = _ops.crt_plan_reads(A, B.mT.contiguous())
    for got, expected in zip(in_place, copied):
        for g, e in zip(got if isinstance(got, tuple) else (got,),
                        expected if isinstance(expected, tuple) else (expected,)):
            assert g.dtype == e.dtype and g.shape == e.shape
            if g.is_floating_point():
                assert_bitwise_equal(g, e)
            else:
                assert torch.equal(g, e)
    assert_zero_and_inf_columns_unusable(in_place[2], batch, m, n)


@every_column_pass
def test_the_statistics_and_norms_of_columns_are_those_of_rows(shape, batch, dtype):
    """ozaki::row_stats_with_norm_scales of B's columns in place (2-D, or 3-D for a batch: its
    batch * n columns) returns, bit for bit, what it returns for the columns copied into rows: the
    reads of a fixed moduli count, in every configuration of the column pass."""
    m, k, n = shape
    _, B = operands(batch, m, k, n, dtype, seed=2 * m + k + 3 * n)
    stats, norms = _ops.row_stats_with_norm_scales(as_column_view(B))
    expected_stats, expected_norms = _ops.row_stats_with_norm_scales(B.mT.reshape(-1, k))
    for got, expected in zip((*stats, norms), (*expected_stats, expected_norms)):
        assert got.shape == expected.shape == (B.numel() // k,)
        assert torch.equal(got, expected)
    assert_zero_and_inf_columns_unusable(stats, batch, m, n)


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [(), (3,)], ids=["matrix", "batch"])
@pytest.mark.parametrize("shape", [(9, 65, 33), (40, 1000, 70), (5, 16000, 40)],
                         ids=lambda s: "x".join(map(str, s)))
def test_the_sampled_magnitudes_of_columns_are_those_of_rows(shape, batch):
    """ozaki::sampled_magnitudes (the fixed-count check's sample) of B's columns in place: the
    bits of the copied rows, with and without norm scales, for rows of every element of a batch
    (different elements give +inf) and an index past the last column (NaN)."""
    m, k, n = shape
    A, B = operands(batch, m, k, n, torch.float64, seed=m + 7 * k + n)
    a, bt_rows = A.reshape(-1, k), B.mT.reshape(-1, k)
    stats_a, norm_a = _ops.row_stats_with_norm_scales(a)
    stats_b, norm_b = _ops.row_stats_with_norm_scales(bt_rows)
    rows_a = torch.arange(0, a.shape[0], 3, device="cuda")
    rows_b = torch.cat([torch.arange(0, bt_rows.shape[0], 2, device="cuda"),
                        torch.tensor([bt_rows.shape[0]], device="cuda")])
    for norms in ((None, None), (norm_a, norm_b)):
        common = (stats_a[0], stats_b[0], stats_a.usable, stats_b.usable, rows_a, rows_b, m, n,
                  *norms)
        got = _ops.sampled_magnitudes(a, as_column_view(B), *common)
        expected = _ops.sampled_magnitudes(a, bt_rows, *common)
        assert_bitwise_equal(got, expected)
        assert got[:, -1].isnan().all() and got[:, :-1].isfinite().any()


def assert_columns_give_the_bits_of_rows(A, B, scale_a, scale_b, stats_a, stats_b, moduli,
                                         monkeypatch):
    """ozaki::gemm_crt of B's columns in place, on every CUDA path, gives the bits of B's columns
    copied into rows and those of the CPU; returns the CPU's result."""
    bt_rows = B.mT.contiguous()
    expected = _ops.gemm_crt(A.cpu(), bt_rows.cpu(), scale_a.cpu(), scale_b.cpu(),
                             tuple(t.cpu() for t in stats_a), tuple(t.cpu() for t in stats_b),
                             moduli)
    for path in crt_paths():
        monkeypatch.setenv("OZAKI_CRT_PATH", path)
        rows = _ops.gemm_crt(A, bt_rows, scale_a, scale_b, stats_a, stats_b, moduli)
        columns = _ops.gemm_crt(A, as_column_view(B), scale_a, scale_b, stats_a, stats_b, moduli)
        assert_bitwise_equal(columns, rows)
        assert_bitwise_equal(columns, expected)
    return expected


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("moduli", [1, 7, 15, 16])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_truncated_product_of_columns_is_that_of_rows(shape, moduli, dtype, monkeypatch):
    """ozaki::gemm_crt of B's columns in place gives the bits of the copied rows on every path
    (the residues of a column tile, transposed through shared memory; NaN/Inf entries of a column
    read at its stride), and those bits are the CPU's."""
    m, k, n = shape
    moduli = max(moduli, crt.smallest_moduli(k))
    A, B = operands((), m, k, n, dtype, seed=7 * m + k + n + moduli)
    bt_rows = B.mT.contiguous()
    stats_a, norm_a = _ops.row_stats_with_norm_scales(A)
    stats_b, norm_b = _ops.row_stats_with_norm_scales(bt_rows)
    scale_a, scale_b = scales(stats_a, norm_a, stats_b, norm_b, moduli, k)
    expected = assert_columns_give_the_bits_of_rows(A, B, scale_a, scale_b, stats_a, stats_b,
                                                    moduli, monkeypatch)
    assert expected.isfinite().any()


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("moduli", [2, 9, 15, 16])
def test_columns_scaled_to_integers_up_to_2_62(dtype, moduli, monkeypatch):
    """B's column residues, some moduli on the FP64 pipe (csrc/crt.h,
    weighted_residues_by_modulus), for scale codes that take B's entries up to 2^62 (of either
    sign; smaller codes leave fractions for the rounding), A's to a few bits: the bits of the
    copied rows and of the CPU. With 2 and 9 moduli the exact products exceed P / 2, and the bits
    compared are those of the same residues all the same."""
    m, k, n = 5, 130, 40
    g = torch.Generator().manual_seed(62 + moduli)
    A = torch.rand((m, k), generator=g, dtype=torch.float64).mul_(2).sub_(1).to(dtype)
    B = torch.rand((k, n), generator=g, dtype=torch.float64).mul_(2).sub_(1).to(dtype)
    B[0], B[1] = 1.0 - torch.finfo(dtype).eps / 2, -(1.0 - torch.finfo(dtype).eps / 2)
    A, B = A.cuda(), B.cuda().contiguous()
    stats_a, _ = _ops.row_stats_with_norm_scales(A)
    stats_b, _ = _ops.row_stats_with_norm_scales(B.mT.contiguous())
    scale_a = (16 * 6 + torch.arange(m)).int().cuda()  # |A'| < 2^7
    exponents = torch.tensor([61, 58, 47, 33, 12, 2, 61, 40] * (n // 8))
    scale_b = (16 * exponents + torch.randint(0, 16, (n,), generator=g)).int().cuda()
    assert_columns_give_the_bits_of_rows(A, B, scale_a, scale_b, stats_a, stats_b, moduli,
                                         monkeypatch)


@pytest.mark.cuda
@pytest.mark.parametrize("batch,shape", [((3,), (70, 45, 13)), ((5,), (1, 300, 2)),
                                         ((2,), (33, 600, 37))])
def test_batches_of_columns_give_the_bits_of_rows(batch, shape, monkeypatch):
    """Batched: elements whose columns share a group of 8 or a tile of 32 (n = 13, 37), and a
    workspace small enough to split the columns into chunks."""
    m, k, n = shape
    A, B = operands(batch, m, k, n, torch.float64, seed=sum(shape))
    bt_rows = B.mT.contiguous()
    stats_a, norm_a = _ops.row_stats_with_norm_scales(A.reshape(-1, k))
    stats_b, norm_b = _ops.row_stats_with_norm_scales(bt_rows.reshape(-1, k))
    scale_a, scale_b = scales(stats_a, norm_a, stats_b, norm_b, 15, k)
    for path in crt_paths():
        monkeypatch.setenv("OZAKI_CRT_PATH", path)
        for workspace in (0, 64 << 10):
            rows = _ops.gemm_crt(A, bt_rows, scale_a, scale_b, stats_a, stats_b, 15, workspace)
            columns = _ops.gemm_crt(A, as_column_view(B), scale_a, scale_b, stats_a, stats_b, 15,
                                    workspace)
            assert_bitwise_equal(columns, rows)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("batch", [(), (2,)], ids=["matrix", "batch"])
@pytest.mark.parametrize("shape", [(64, 300, 70), (1, 9000, 33), (3, 16000, 9), (200, 130, 2)],
                         ids=lambda s: "x".join(map(str, s)))
def test_the_default_call_reads_columns_in_place_and_gives_the_cpu_bits(shape, batch, dtype):
    """The default dgemm/sgemm of a contiguous B reads its columns in place (in_place_bt is B's
    own memory) and returns the CPU's bits, on its first call, its guessed and its replayed
    calls; B given as the transpose of a contiguous matrix (its columns already rows) agrees."""
    m, k, n = shape
    A, B = operands(batch, m, k, n, dtype, seed=m + k + n, specials=False)
    bt = product.in_place_bt(B, Options())
    assert bt.data_ptr() == B.data_ptr() and not bt.is_contiguous()
    call = ozaki.matmul if batch else (ozaki.dgemm if dtype == torch.float64 else ozaki.sgemm)
    expected = call(A.cpu(), B.cpu())
    for _ in range(4):  # eager, then guessed, then replayed where the shape is small enough
        assert_bitwise_equal(call(A, B), expected)
    transposed = B.mT.contiguous().mT  # B's values, its columns as rows
    assert_bitwise_equal(call(A, transposed), expected)


def test_column_views_are_those_the_operators_read():
    """_ops.is_column_view is the operators' test (csrc/checks.h), stride by stride: B.mT of a
    contiguous B, 2-D or a batch whose matrices lie n k apart; not a batch of one whose stride
    torch's is_contiguous passes (every other matrix of a batch, a stride-0 batch of one)."""
    X = torch.randn(7, 3, dtype=torch.float64)
    assert _ops.is_column_view(X.mT) and _ops.is_column_view(torch.randn(2, 7, 3).mT)
    assert not _ops.is_column_view(X.mT.contiguous())  # rows already
    assert not _ops.is_column_view(X[:, :2].mT)  # B with gaps between its rows
    every_other = torch.randn(2, 7, 3, dtype=torch.float64)[::2]
    stride_zero = X.as_strided((1, 7, 3), (0, 3, 1))
    for B in (every_other, stride_zero):
        assert B.is_contiguous() and not _ops.is_column_view(B.mT)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("batch_of_one", ["every other", "stride 0"])
def test_a_batch_of_one_at_any_stride_gives_the_cpu_bits(batch_of_one, dtype):
    """B a batch of one matrix whose batch stride is not n k (torch calls it contiguous all the
    same): read as rows, the CPU's bits (the operators refused it as columns before)."""
    m, k, n = 40, 300, 9
    A, B = operands((1,), m, k, n, dtype, seed=5, specials=False)
    if batch_of_one == "every other":
        B = torch.cat([B, B]).contiguous()[::2]
    else:
        B = B[0].as_strided((1, k, n), (0, n, 1))
    expected = ozaki.matmul(A.cpu(), B.cpu())
    for _ in range(3):
        assert_bitwise_equal(ozaki.matmul(A, B), expected)


@pytest.mark.cuda
@pytest.mark.parametrize("keep", ["prepare", "repeated"])
@pytest.mark.parametrize("shape", [(64, 300, 70), (9, 16000, 35), (200, 130, 2)],
                         ids=lambda s: "x".join(map(str, s)))
def test_kept_operands_read_columns_in_place_and_give_the_cpu_bits(shape, keep, monkeypatch):
    """With A prepared or kept unasked, the default call reads a contiguous B's columns in place
    too (crt_kept_plan_reads and gemm_crt take B.mT; nothing copies them into rows from Python)
    and returns the CPU's bits, on eager, guessed and replayed calls alike."""
    from ozaki import repeated
    monkeypatch.setattr(repeated, "MIN_ENTRIES", 0)
    repeated.clear()
    m, k, n = shape
    A, B = operands((), m, k, n, torch.float64, seed=m + k + n, specials=False)
    expected = ozaki.dgemm(A.cpu(), B.cpu())
    copies = []
    transposed = _ops.transposed
    monkeypatch.setattr(_ops, "transposed", lambda x: copies.append(x.shape) or transposed(x))
    handle = ozaki.prepare(A) if keep == "prepare" else None
    for _ in range(5):
        assert_bitwise_equal(ozaki.dgemm(A, B), expected)
    assert copies == [], "B's columns were copied into rows"
    if keep == "prepare":
        assert handle._residues, "A's residues were kept"
        handle.release()
    else:
        assert repeated.info()[0]["uses"] >= 3
    repeated.clear()


@pytest.mark.cuda
@pytest.mark.parametrize("moduli", [8, 15, 16])
@pytest.mark.parametrize("batch,shape", [((), (64, 300, 70)), ((), (33, 65, 9)),
                                         ((), (9, 16000, 35)), ((), (3, 2048, 1700)),
                                         ((2,), (40, 600, 37))],
                         ids=lambda s: "x".join(map(str, s)))
def test_a_fixed_count_reads_columns_in_place_and_gives_the_cpu_bits(batch, shape, moduli,
                                                                     monkeypatch):
    """A fixed moduli count of a contiguous B (NaN/Inf and zero columns included) reads its columns
    in place: nothing copies them into rows, and the product and the plan (the check's predicted
    error, from the sampled columns) are those of B's columns given as rows and those of the
    CPU."""
    m, k, n = shape
    moduli = max(moduli, crt.smallest_moduli(k))
    A, B = operands(batch, m, k, n, torch.float64, seed=m + k + n + moduli)
    options = Options(moduli=moduli)
    expected, expected_plan = product.real_product(A.cpu(), B.cpu(), torch.float64, options)
    copies = []
    transposed = _ops.transposed
    monkeypatch.setattr(_ops, "transposed", lambda x: copies.append(x.shape) or transposed(x))
    got, plan = product.real_product(A, B, torch.float64, options)
    assert copies == [], "B's columns were copied into rows"
    assert_bitwise_equal(got, expected)
    assert plan == expected_plan and plan.moduli == moduli
    as_rows, rows_plan = product.real_product(A, B.mT.contiguous().mT, torch.float64, options)
    assert_bitwise_equal(as_rows, expected)
    assert rows_plan == expected_plan


def test_truncated_scheme_two_plans_take_columns_in_place_on_cuda_only():
    """in_place_bt copies B's columns into rows on the CPU and, on CUDA, for rounding and scheme I
    (whose reads take rows), and leaves an already row-major B.mT as it is; on CUDA the default
    plan and a fixed moduli count take B's columns in place."""
    B = torch.rand(50, 30, dtype=torch.float64)
    for options in (Options(), Options(moduli=15), Options(rounding="nearest")):
        bt = product.in_place_bt(B, options)
        assert bt.is_contiguous() and torch.equal(bt, B.mT)
    X = torch.rand(30, 50, dtype=torch.float64)
    assert product.in_place_bt(X.mT, Options()).data_ptr() == X.data_ptr()
    if torch.cuda.is_available():
        Bc = B.cuda()
        for options in (Options(rounding="nearest"), Options(backend="int8"),
                        Options(backend="crt", moduli=15, rounding="nearest")):
            assert product.in_place_bt(Bc, options).is_contiguous()
        for options in (Options(), Options(moduli=15), Options(backend="crt", moduli=9)):
            assert product.in_place_bt(Bc, options).data_ptr() == Bc.data_ptr()


@pytest.mark.cuda
def test_a_strided_bt_that_is_not_columns_is_named():
    """gemm_crt and crt_plan_reads take B's columns in place, not any strided bt: a bt with a
    column stride of its own raises an error that names bt and its strides."""
    A, B = operands((), 8, 40, 12, torch.float64, seed=1, specials=False)
    wide = torch.zeros(40, 24, dtype=torch.float64, device="cuda")
    wide[:, ::2] = B
    bt = wide[:, ::2].mT
    with pytest.raises(RuntimeError, match=r"bt must be contiguous or the transpose"):
        _ops.crt_plan_reads(A, bt)
    stats_a, norm_a = _ops.row_stats_with_norm_scales(A)
    stats_b, norm_b = _ops.row_stats_with_norm_scales(B.mT.contiguous())
    scale_a, scale_b = scales(stats_a, norm_a, stats_b, norm_b, 15, 40)
    with pytest.raises(RuntimeError, match=r"bt must be contiguous or the transpose"):
        _ops.gemm_crt(A, bt, scale_a, scale_b, stats_a, stats_b, 15)
