"""ozaki::row_stats_norms (csrc/ozaki.cpp): row_stats and row_norm_exponents of the same rows in
one kernel, bit for bit the two operators' results; and the scheme-II path of ozaki/product.py,
which takes its row stats and norm exponents from it."""

import math

import pytest
import torch

import ozaki
from helpers import assert_bitwise_equal, cpu_and_cuda, phi_tensor, seeded
from ozaki import _ops, product

DTYPES = [pytest.param(torch.float64, id="float64"), pytest.param(torch.float32, id="float32")]
LEAST_SUBNORMAL = {torch.float64: 2.0 ** -1074, torch.float32: 2.0 ** -149}
nan, inf = float("nan"), float("inf")


def assert_same_as_two_ops(a):
    """row_stats_norms(a) equals (row_stats(a), row_norm_exponents(a, tau)): dtypes, devices and
    values."""
    fused = torch.ops.ozaki.row_stats_norms(a)
    stats = _ops.row_stats(a)
    separate = (*stats, _ops.row_norm_exponents(a, stats[0]))
    assert len(fused) == 4
    for got, want in zip(fused, separate):
        assert got.dtype == want.dtype and got.device == want.device and got.shape == (a.shape[0],)
        assert torch.equal(got, want)
    return fused


def special_rows(rows, k, dtype, seed):
    """Fresh entries of a wide exponent range (phi = 4) whose first 12 rows stress tau, the span
    and the norm: NaN and +-Inf (rows 0-3), zero and -0 rows (4, 5), subnormals alone (6, 7) and
    with normal entries (8), the format's largest values, a norm beyond the format (9, 10), and one
    nonzero entry (11)."""
    assert rows >= 12
    info = torch.finfo(dtype)
    a = phi_tensor((rows, k), dtype, seeded(seed), phi=4.0)
    a[0, k // 2] = nan
    a[1, 0] = inf
    a[2, k - 1] = -inf
    a[3, 0], a[3, k - 1] = nan, inf
    a[4] = 0.0
    a[5] = -0.0
    a[6] = LEAST_SUBNORMAL[dtype]
    a[7] = a[7].clamp(-1.0, 1.0) * (info.tiny / 2)
    a[8, ::2] *= info.tiny
    a[9] = info.max
    a[10] = -info.max
    a[11] = 0.0
    a[11, k - 1] = -3.0
    return a


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 3, 4, 7, 1023, 1024, 1030, 5000])
def test_row_stats_norms_equal_row_stats_and_row_norm_exponents(device, dtype, k):
    """Every k from one entry per row to rows where the four-loads loop and its tail both run
    (k = 5000 for 256 threads), k not a multiple of 4, and every special row."""
    a = special_rows(20, k, dtype, seed=k).to(device)
    tau, span, nonfinite, nu = assert_same_as_two_ops(a)
    assert nonfinite[:4].all() and not nonfinite[4:].any()
    assert (tau[4:6] == 0).all() and (span[4:6] == 0).all() and (nu[4:6] == 0).all()
    assert tau[6] == math.frexp(LEAST_SUBNORMAL[dtype])[1] and span[6] == 1  # 2^(tau - 1)
    assert tau[9] == tau[10] == math.frexp(torch.finfo(dtype).max)[1]
    if k > 1:
        assert (span[12:] > 0).all()  # the random rows are not trivial


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0, 5), (0, 0), (3, 0), (1, 1)])
def test_row_stats_norms_of_degenerate_shapes(device, dtype, shape):
    """No rows (nothing launched), rows without entries (tau = nu = 0), a single entry."""
    a = phi_tensor(shape, dtype, seeded(7)).to(device)
    tau, span, nonfinite, nu = assert_same_as_two_ops(a)
    if shape[1] == 0:
        assert tau.tolist() == span.tolist() == nu.tolist() == [0] * shape[0]
        assert not nonfinite.any()


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_stats_norms_cuda_many_long_rows(dtype):
    """Many long rows (more than the blocks that fit on the GPU at once, each row longer than a
    block's four-loads stride), equal to the CPU kernels' and to the two CUDA operators'."""
    rows, k = 400, 65536
    g = torch.Generator(device="cuda").manual_seed(11)
    a = ((torch.rand(rows, k, generator=g, device="cuda", dtype=dtype) - 0.5)
         * torch.exp(4.0 * torch.randn(rows, k, generator=g, device="cuda", dtype=dtype)))
    a[::37, 5] = nan
    a[3::41] = 0.0
    fused = assert_same_as_two_ops(a)
    for got, want in zip(fused, torch.ops.ozaki.row_stats_norms(a.cpu())):
        assert torch.equal(got.cpu(), want)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_stats_norms_cuda_equals_cpu(dtype):
    a = special_rows(40, 777, dtype, seed=5)
    for got, want in zip(torch.ops.ozaki.row_stats_norms(a.cuda()),
                         torch.ops.ozaki.row_stats_norms(a)):
        assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_row_stats_norms_rejects_bad_arguments(device):
    op = torch.ops.ozaki.row_stats_norms
    good = torch.ones(3, 4, dtype=torch.float64, device=device)
    cases = [
        (good[0], "ozaki::row_stats_norms: a must be 2-D, got 1-D"),
        (good.reshape(1, 3, 4), "ozaki::row_stats_norms: a must be 2-D, got 3-D"),
        (good.half(), "ozaki::row_stats_norms: a must be float64 or float32, got Half"),
        (good.long(), "ozaki::row_stats_norms: a must be float64 or float32, got Long"),
        (good.t(), "ozaki::row_stats_norms: a must be contiguous"),
    ]
    for a, message in cases:
        with pytest.raises(RuntimeError, match=message):
            op(a)


def test_row_stats_norms_wrapper_groups_the_stats():
    a = phi_tensor((5, 9), torch.float64, seeded(2))
    stats, nu = _ops.row_stats_norms(a)
    assert all(torch.equal(x, y) for x, y in zip(stats, _ops.row_stats(a)))
    assert torch.equal(nu, _ops.row_norm_exponents(a, stats[0]))


# ---- the scheme-II path of ozaki/product.py --------------------------------------------------


def fail(name):
    def failing(*args, **kwargs):
        raise AssertionError(f"{name} called")
    return failing


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("batch", [(), (3,)])
@pytest.mark.parametrize("options", [dict(), dict(backend="crt"), dict(backend="crt", moduli=9),
                                     dict(moduli=12)])
def test_crt_path_reads_stats_and_norms_from_one_operator(device, batch, options, monkeypatch):
    """Where the plan may be scheme II, the product and ozaki.plan launch row_stats_norms and
    neither row_stats nor row_norm_exponents, and give the plan and bits of the separate operators
    (Estimates with row_stats, whose norm_exponents runs row_norm_exponents)."""
    options = {"backend": "auto", **options}  # _plan_for's own default is "fp16"
    g = seeded(21)
    A = phi_tensor((*batch, 12, 40), torch.float64, g, phi=2.0).to(device)
    B = phi_tensor((*batch, 40, 9), torch.float64, g, phi=2.0).to(device)
    a, bt = product._row_operands(A, B)
    est = product.Estimates(a, bt, product._row_stats(a), product._row_stats(bt))
    want_plan, inputs = product._plan_for(est, A.dtype, None, None, None, **options)
    want_C, _ = product.planned_product(a, bt, est.stats_a, est.stats_b, est, A.dtype, **options)

    monkeypatch.setattr(_ops, "row_stats", fail("row_stats"))
    monkeypatch.setattr(_ops, "row_norm_exponents", fail("row_norm_exponents"))
    assert ozaki.plan(A, B, **options) == want_plan
    C = ozaki.matmul(A, B, **options) if batch else ozaki.dgemm(A, B, **options)
    assert_bitwise_equal(C, want_C)
    if options["backend"] == "crt":
        assert want_plan.backend == "crt" and inputs is not None


@pytest.mark.parametrize("options", [dict(backend="fp16"), dict(backend="int8"),
                                     dict(slices=3), dict(fast=False), dict(rounding="nearest"),
                                     dict(backend="crt", rounding="nearest")])
def test_scheme_one_options_keep_the_row_stats_operator(options, monkeypatch):
    """Options that rule scheme II out read only the row stats (no norms)."""
    A, B = phi_tensor((6, 20), torch.float64, seeded(4)), phi_tensor((20, 5), torch.float64,
                                                                     seeded(5))
    monkeypatch.setattr(_ops, "row_stats_norms", fail("row_stats_norms"))
    monkeypatch.setattr(_ops, "row_norm_exponents", fail("row_norm_exponents"))
    assert ozaki.plan(A, B, **options).backend != "crt"
    ozaki.dgemm(A, B, **options)


def test_long_inner_dimension_keeps_the_row_stats_operator(monkeypatch):
    """k beyond scheme II's limit: the plan is scheme I, the norms are not read."""
    k = product.crt.MAX_INNER + 1
    A, B = torch.ones(1, k, dtype=torch.float64), torch.ones(k, 1, dtype=torch.float64)
    monkeypatch.setattr(_ops, "row_stats_norms", fail("row_stats_norms"))
    assert ozaki.plan(A, B).backend != "crt"
