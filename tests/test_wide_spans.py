"""Rows of wide span (docs/accuracy.md, "Rows of wide span"): products whose rows put tens to
hundreds of binades side by side (units rescaled by 1e20, powers of two between 2^-90 and 2^90,
polynomial rows, one huge entry meeting one tiny one) keep the promise of every call: no default
or automatic call is less accurate than native, against exact integer references, with the same
bits on the CPU and CUDA; a count the caller fixed warns where it is far below that."""

import math
import re
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch

import ozaki
from helpers import assert_bitwise_equal, cpu_and_cuda, scale_of, seeded
from ozaki import _ops, accuracy, crt
from ozaki.fixed_counts import AccuracyWarning
from ozaki.product import BackendWarning, Estimates, row_operands

GEMMS = {torch.float64: ozaki.dgemm, torch.float32: ozaki.sgemm}
AUTOMATIC_BACKENDS = ("auto", "crt", "int8", "fp16")


def rescaled_units(dtype, decades, size=64, seed=0):
    """(A D, D^-1 B): A, B standard normal, D = diag(logspace(-decades, decades, size))."""
    g = seeded(seed)
    A = torch.randn(size, size, generator=g, dtype=torch.float64)
    B = torch.randn(size, size, generator=g, dtype=torch.float64)
    D = torch.logspace(-decades, decades, size, dtype=torch.float64)
    return (A * D).to(dtype), (B / D[:, None]).to(dtype)


def powers_of_two(both_sides, seed):
    """A's columns scaled by random powers of two 2^-90 .. 2^90, and B's rows by their inverses
    when both_sides (the product is A @ B in other units), else B as drawn."""
    g = seeded(seed)
    A = torch.randn(40, 48, generator=g, dtype=torch.float64)
    B = torch.randn(48, 32, generator=g, dtype=torch.float64)
    exponents = torch.randint(-90, 91, (48,), generator=g).double()
    A = A * torch.exp2(exponents)
    if both_sides:
        B = B * torch.exp2(-exponents)[:, None]
    return A, B


def vandermonde(seed):
    """Rows x_i^l, l = 0 .. 29, for x_i from 1e-3 to 1e3 with random signs (each row spans up to
    90 decades), times coefficients c_l of order 1e-3^l (a Taylor-like series: at x = 1e3 every
    term is of order 1, 270 decades below the row's and column's largest entries together)."""
    g = seeded(seed)
    signs = torch.where(torch.rand(24, generator=g) < 0.5, -1.0, 1.0).double()
    x = signs * torch.logspace(-3, 3, 24, dtype=torch.float64)
    powers = torch.arange(30, dtype=torch.float64)
    V = x[:, None] ** powers[None, :]
    coefficients = torch.randn(30, 16, generator=g, dtype=torch.float64) * 1e-3 ** powers[:, None]
    return V, coefficients


def huge_meets_tiny(seed):
    """One entry 2^70 times larger in every row of A, meeting the one entry 2^70 times smaller of
    every column of B: every term of C is of order 1, 2^-64 of the rows' scales."""
    g = seeded(seed)
    A = torch.randn(40, 50, generator=g, dtype=torch.float64)
    B = torch.randn(50, 30, generator=g, dtype=torch.float64)
    A[:, 17] *= 2.0 ** 70
    B[17, :] *= 2.0 ** -70
    return A, B


CASES = {
    "1e20 beside 1e-20": lambda: (torch.tensor([[1e20, 1e-20]], dtype=torch.float64),
                                  torch.tensor([[1e-20], [1e20]], dtype=torch.float64)),
    "units rescaled by 1e20": lambda: rescaled_units(torch.float64, 20),
    "columns times 2^-90 .. 2^90": lambda: powers_of_two(False, seed=1),
    "units in powers of two 2^-90 .. 2^90": lambda: powers_of_two(True, seed=2),
    "Vandermonde rows": lambda: vandermonde(seed=3),
    "huge meets tiny": lambda: huge_meets_tiny(seed=4),
    "float32, units rescaled by 1e12": lambda: rescaled_units(torch.float32, 12, size=48, seed=5),
}


def assert_no_worse_than_twice_native(C, A, B, exact):
    ours = accuracy.componentwise_error(C.cpu(), exact, A, B)
    native = accuracy.componentwise_error(A @ B, exact, A, B)
    assert ours <= 2 * native, (ours, native)
    return ours


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("backend", AUTOMATIC_BACKENDS)
@pytest.mark.parametrize("device", cpu_and_cuda())
def test_automatic_calls_are_no_worse_than_native(device, backend, case):
    A, B = CASES[case]()
    gemm = GEMMS[A.dtype]
    exact = accuracy.exact_matmul(A, B)
    C = gemm(A.to(device), B.to(device), backend=backend)
    assert_no_worse_than_twice_native(C, A, B, exact)
    if device == "cuda":
        assert_bitwise_equal(C, gemm(A, B, backend=backend))
    plan = ozaki.plan(A, B, backend=backend)
    assert "capped" not in str(plan)
    # no AccuracyWarning; backend="crt" that scheme I replaces says so (BackendWarning's text)
    assert plan.warning is None or (backend == "crt" and plan.warning.startswith(
        "ozaki: backend='crt' cannot be shown to meet the error bound")), plan.warning
    assert plan.exact or plan.rounding == "nearest" or plan.predicted_error <= 2.0 ** -24, plan


def long_rows_in_rescaled_units(seed):
    """Rows of 6000 entries in units rescaled by 1e20 (each row of A spans 40 decades): on CUDA
    the plan reads them in blocks of 1024 threads that hold a row in registers."""
    g = seeded(seed)
    D = torch.logspace(-20, 20, 6000, dtype=torch.float64)
    A = torch.randn(3, 6000, generator=g, dtype=torch.float64) * D
    B = torch.randn(6000, 4, generator=g, dtype=torch.float64) / D[:, None]
    return A, B


def many_columns_of_wide_span(k, n, reach, seed):
    """n columns of k entries, B's rows times random powers of two 2^-reach .. 2^reach and A's
    columns by their inverses (each column of B spans up to 2 reach binades): on CUDA, with 132
    multiprocessors, B's columns are read in place 16 to a block (n >= 1569, k <= 3971) or 8 (k up
    to 7943)."""
    g = seeded(seed)
    exponents = torch.randint(-reach, reach + 1, (k,), generator=g).double()
    A = torch.randn(2, k, generator=g, dtype=torch.float64) * torch.exp2(-exponents)
    B = torch.randn(k, n, generator=g, dtype=torch.float64) * torch.exp2(exponents)[:, None]
    return A, B


# Wide spans in the CUDA plan passes that few rows or columns do not reach (docs/algorithm.md,
# 9.10 and 9.15): long rows, and many columns read in groups of 16 or 8.
LONG_CASES = {
    "rows of 6000 in units rescaled by 1e20": lambda: long_rows_in_rescaled_units(seed=6),
    # wide scheme II, 18 moduli, from the columns' norm scales
    "1600 columns of 600 spanning 10 binades, 16 to a group":
        lambda: many_columns_of_wide_span(600, 1600, 5, seed=7),
    # past every truncated plan: the exact product, rounded once
    "1000 columns of 4100 spanning 180 binades, 8 to a group":
        lambda: many_columns_of_wide_span(4100, 1000, 90, seed=8),
}


@pytest.mark.parametrize("case", LONG_CASES)
@pytest.mark.parametrize("device", cpu_and_cuda())
def test_wide_spans_in_long_rows_and_many_columns(device, case):
    """The default call keeps its promise against the exact product, with the CPU's bits on
    CUDA, where the plan's passes over long rows and many columns run."""
    A, B = LONG_CASES[case]()
    C = ozaki.dgemm(A.to(device), B.to(device))
    assert_no_worse_than_twice_native(C, A, B, accuracy.exact_matmul(A, B))
    if device == "cuda":
        assert_bitwise_equal(C, ozaki.dgemm(A, B))
    plan = ozaki.plan(A, B)
    assert "capped" not in str(plan) and plan.warning is None


def test_the_reported_cases_give_the_exact_values():
    A, B = CASES["1e20 beside 1e-20"]()
    for backend in AUTOMATIC_BACKENDS:
        assert ozaki.dgemm(A, B, backend=backend).item() == 2.0
    A, B = CASES["units rescaled by 1e20"]()
    C = ozaki.dgemm(A, B)
    assert (C - accuracy.round_exact(accuracy.exact_matmul(A, B))).abs().max() <= 1e-15


def test_the_plan_says_which_path_and_why():
    # rows within reach of 40 moduli: exact scheme II
    A, B = CASES["units rescaled by 1e20"]()
    plan = ozaki.plan(A, B)
    assert plan.backend == "crt" and plan.exact and plan.rounding is None
    assert "(the exact product, rounded once)" in str(plan)
    assert plan.reason == "exact scheme II: its estimate cannot resolve every entry"
    # rows spanning 1000 bits: the correctly rounded plan, entry by entry where it must
    A = torch.tensor([[1.0, 2.0 ** -1000], [0.5, 3.0]], dtype=torch.float64)
    B = torch.tensor([[2.0 ** -1000, 1.0], [1.0, 1.0]], dtype=torch.float64)
    plan = ozaki.plan(A, B)
    assert plan.rounding == "nearest" and plan.full_split_slices > 40
    assert plan.reason.startswith("exact: no truncated split can be shown to meet the error bound "
                                  f"and the full split needs {plan.full_split_slices} slices")
    assert (f"the entries of rows or columns spanning more than the {plan.bits_captured} bits of "
            "its slices that these leave undecided are computed exactly") in str(plan)
    assert_bitwise_equal(ozaki.dgemm(A, B), accuracy.round_exact(accuracy.exact_matmul(A, B)))


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_crt_asked_for_where_scheme_two_cannot_serve_says_so(device):
    """backend="crt" on rows spanning 1000 bits, which neither truncated nor exact scheme II can
    serve, runs INT8 scheme I's correctly rounded plan and says so (BackendWarning); the default
    backend runs the same plan without a warning."""
    A = torch.tensor([[1.0, 2.0 ** -1000], [0.5, 3.0]], dtype=torch.float64)
    B = torch.tensor([[2.0 ** -1000, 1.0], [1.0, 1.0]], dtype=torch.float64)
    text = (r"ozaki: backend='crt' cannot be shown to meet the error bound on these operands "
            r"\(.*, and exact scheme II needs more than 40 moduli\), so INT8 scheme I runs in "
            r"its place")
    with pytest.warns(BackendWarning, match=text) as caught:
        C = ozaki.dgemm(A.to(device), B.to(device), backend="crt")
    assert_bitwise_equal(C, accuracy.round_exact(accuracy.exact_matmul(A, B)))
    assert [w.filename for w in caught] == [__file__]  # the caller's line, not ozaki's
    with warnings.catch_warnings():  # ozaki.plan does not warn: the text is in plan.warning
        warnings.simplefilter("error")
        plan = ozaki.plan(A.to(device), B.to(device), backend="crt")
    assert re.match(text, plan.warning) and plan.warning in str(plan)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_bitwise_equal(ozaki.dgemm(A.to(device), B.to(device)), C)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_complex_batched_and_drop_in_calls(device):
    A, B = rescaled_units(torch.float64, 20, size=24, seed=6)
    A2, B2 = rescaled_units(torch.float64, 15, size=24, seed=7)
    # complex: both parts are exact dot products of length 2k
    Z = torch.complex(A, A2).to(device)
    W = torch.complex(B, B2).to(device)
    product = ozaki.matmul(Z, W).cpu()
    rows = torch.cat([torch.cat([A, -A2], 1), torch.cat([A2, A], 1)])
    cols = torch.cat([B, B2])
    exact = accuracy.exact_matmul(rows, cols)
    stacked = torch.cat([product.real, product.imag])
    native = Z.cpu() @ W.cpu()
    ours = accuracy.componentwise_error(stacked, exact, rows, cols)
    theirs = accuracy.componentwise_error(torch.cat([native.real, native.imag]), exact, rows, cols)
    assert ours <= 2 * theirs, (ours, theirs)
    assert_bitwise_equal(product, ozaki.matmul(Z.cpu(), W.cpu()))
    # batched: one plan for the batch, every element no worse than native
    batch_a, batch_b = torch.stack([A, A2]), torch.stack([B, B2])
    C = ozaki.matmul(batch_a.to(device), batch_b.to(device)).cpu()
    for e in range(2):
        assert_no_worse_than_twice_native(C[e], batch_a[e], batch_b[e],
                                          accuracy.exact_matmul(batch_a[e], batch_b[e]))
        assert_bitwise_equal(C[e], ozaki.dgemm(batch_a[e], batch_b[e]))  # exact: plan-independent
    # the drop-in mode reroutes @ to the same product
    with ozaki.enable():
        dropped_in = (A.to(device) @ B.to(device)).cpu()
    assert_bitwise_equal(dropped_in, ozaki.dgemm(A, B))
    assert_no_worse_than_twice_native(dropped_in, A, B, accuracy.exact_matmul(A, B))


# ---- fixed counts -------------------------------------------------------------------------------


def recorded_warnings(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [w for w in caught if issubclass(w.category, AccuracyWarning)]


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("options,option", [({"moduli": 16}, "moduli=16"),
                                            ({"backend": "int8", "slices": 12}, "slices=12"),
                                            ({"backend": "fp16", "slices": 9}, "slices=9")])
def test_a_fixed_count_far_below_native_warns_once_and_keeps_its_bound(device, options, option):
    A, B = CASES["units rescaled by 1e20"]()
    plan = ozaki.plan(A.to(device), B.to(device), **options)
    assert plan.warning is not None and option in plan.warning
    assert "omit" in plan.warning and "rounding='nearest'" in plan.warning
    assert plan.predicted_error > 16 * plan.native_level
    assert "Warning: " + plan.warning in str(plan)
    caught = recorded_warnings(lambda: ozaki.dgemm(A.to(device), B.to(device), **options))
    assert [str(w.message) for w in caught] == [plan.warning]
    # the ozaki.plan call the warning names gives the plan that ran (backend and fast mode
    # included)
    named = re.findall(r"ozaki\.plan\(A, B, ([^)]*)\)", plan.warning)
    assert len(named) == 1, plan.warning
    asked = eval(f"dict({named[0]})")
    assert ozaki.plan(A.to(device), B.to(device), **asked) == plan
    # the count is the caller's: the documented bound, relative to the rows' scales
    C = ozaki.dgemm(A.to(device), B.to(device), **options).cpu()
    exact = accuracy.exact_matmul(A, B)
    scale = accuracy.exact_matmul(A.abs(), B.abs())
    error = accuracy.componentwise_error(C, exact, A, B, magnitudes=scale)
    assert error > 16 * accuracy.componentwise_error(A @ B, exact, A, B, magnitudes=scale)


#: Entries whose terms lie more than 1074 bits below their rows' scales: every term of the
#: check's sampled magnitude underflows in float64.
UNDERFLOWING = {
    "2^600 against 2^-600": ([[2.0 ** 600, 2.0 ** -600]], [[2.0 ** -600], [2.0 ** 600]]),
    "1e300 beside 1e-30": ([[1e300, 1e-30]], [[0.0], [1e30]]),
    "a subnormal term": ([[1.0, 5e-324]], [[5e-324], [-0.25555]]),
}


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("options", [{"slices": 2}, {"backend": "int8", "slices": 3},
                                     {"backend": "fp16", "slices": 6}, {"moduli": 8},
                                     {"moduli": 16}], ids=lambda o: str(o))
@pytest.mark.parametrize("case", UNDERFLOWING)
def test_a_fixed_count_warns_where_the_sampled_terms_underflow(device, options, case):
    """An entry whose every term underflows in the check's float64 sum is far below its rows'
    scales, not an exact zero: a fixed count that cannot reach it warns (it returned 0 for 2, or
    raised OverflowError for a subnormal magnitude, without a word)."""
    A, B = (torch.tensor(x, dtype=torch.float64, device=device) for x in UNDERFLOWING[case])
    plan = ozaki.plan(A, B, **options)
    assert plan.warning is not None and plan.predicted_error > 16 * plan.native_level, plan
    caught = recorded_warnings(lambda: ozaki.dgemm(A, B, **options))
    assert [str(w.message) for w in caught] == [plan.warning]


def test_batched_and_complex_calls_warn_once():
    A, B = CASES["units rescaled by 1e20"]()
    narrow_a, narrow_b = torch.randn(64, 64, dtype=torch.float64), torch.randn(64, 64, dtype=torch.float64)
    # only element 5 of 9 is wide: the check samples the element holding the widest row
    batch_a = torch.stack([narrow_a] * 5 + [A] + [narrow_a] * 3)
    batch_b = torch.stack([narrow_b] * 9)
    batch_b[5] = B
    caught = recorded_warnings(lambda: ozaki.matmul(batch_a, batch_b, moduli=15))
    assert len(caught) == 1 and "moduli=15" in str(caught[0].message)
    Z = torch.complex(A, A)
    caught = recorded_warnings(lambda: ozaki.matmul(Z, torch.complex(B, B), moduli=15))
    assert len(caught) == 1


@pytest.mark.cuda
@pytest.mark.parametrize("moduli", [12, 16])
@pytest.mark.parametrize("case", CASES)
def test_fixed_counts_reading_b_in_place_give_the_cpu_bits_and_plan(case, moduli):
    """On CUDA a fixed moduli count reads a contiguous B's columns in place (their statistics,
    norm scales and the check's sampled columns, docs/algorithm.md, "B's columns in place"): on
    every wide-span case its product, its plan (the check's predicted error) and its warning are
    the CPU's, bit for bit."""
    from ozaki import product
    from ozaki.options import Options
    A, B = CASES[case]()
    A, B = A.contiguous(), B.contiguous()
    options = Options(moduli=moduli)
    Bc = B.cuda()
    if B.shape[1] > 1:  # one column is a row already
        assert product.in_place_bt(Bc, options).data_ptr() == Bc.data_ptr()
    with warnings.catch_warnings(record=True) as on_cpu:
        warnings.simplefilter("always")
        expected, expected_plan = product.real_product(A, B, A.dtype, options)
    with warnings.catch_warnings(record=True) as on_cuda:
        warnings.simplefilter("always")
        got, plan = product.real_product(A.cuda(), Bc, A.dtype, options)
    assert_bitwise_equal(got.cpu(), expected)
    assert plan == expected_plan
    assert [str(w.message) for w in on_cuda] == [str(w.message) for w in on_cpu]


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_fixed_count_that_meets_native_does_not_warn(device, dtype):
    g = seeded(8)
    A = accuracy.phi_matrix(40, 300, 0.5, generator=g, dtype=dtype).to(device)
    B = accuracy.phi_matrix(300, 30, 0.5, generator=g, dtype=dtype).to(device)
    automatic = ozaki.plan(A, B)
    assert automatic.backend == "crt"
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccuracyWarning)
        plan = ozaki.plan(A, B, moduli=automatic.moduli)
        GEMMS[dtype](A, B, moduli=automatic.moduli)
        GEMMS[dtype](A, B, backend="int8", slices=ozaki.plan(A, B, backend="int8").slices)
    assert plan.warning is None and plan.predicted_error <= 16 * plan.native_level
    # the sampled entries' |A||B| is at least the planner's lower bound of it (to float64's
    # rounding of the sample's sums), so the prediction is at most the planner's
    assert plan.predicted_error <= automatic.predicted_error * (1 + 1e-9)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("backend", ["int8", "fp16"])
def test_a_fixed_slice_count_that_keeps_every_pair_is_exact_and_does_not_warn(device, backend):
    """slices at least the full split (all pairs), or 2 full - 1 in fast mode, keep every pair of
    the full split: the plan is exact (predicted_error 0, the exact product rounded about once)
    and no AccuracyWarning comes, on rows whose products lie far below their scales (where a
    count one short warns)."""
    A = torch.tensor([[1.0, 2.0 ** -60, 0.0], [0.5, 0.25, 0.125]], dtype=torch.float64,
                     device=device)
    B = torch.tensor([[0.0, 1.0], [2.0 ** -60, 1.0], [1.0, 1.0]], dtype=torch.float64,
                     device=device)
    full = ozaki.plan(A, B, backend=backend).full_split_slices
    exact = [[sum(Fraction(A[i, l].item()) * Fraction(B[l, j].item()) for l in range(3))
              for j in range(2)] for i in range(2)]
    for slices, fast in ((full, False), (full + 2, False), (2 * full - 1, True), (2 * full, True)):
        plan = ozaki.plan(A, B, backend=backend, slices=slices, fast=fast)
        assert plan.exact and plan.predicted_error == 0 and plan.warning is None, plan
        with warnings.catch_warnings():
            warnings.simplefilter("error", AccuracyWarning)
            C = ozaki.dgemm(A, B, backend=backend, slices=slices, fast=fast)
        assert C.tolist() == [[float(x) for x in row] for row in exact]
    one_short = ozaki.plan(A, B, backend=backend, slices=2 * full - 2, fast=True)
    assert not one_short.exact and one_short.warning is not None


def test_too_few_moduli_for_ordinary_data_warn_and_name_the_planned_count():
    """On ordinary data the warning states what its prediction rests on and blames no entry of
    the product (none lies far below the rows' scales)."""
    A, B = torch.randn(30, 200, dtype=torch.float64), torch.randn(200, 20, dtype=torch.float64)
    planned = ozaki.plan(A, B).moduli
    plan = ozaki.plan(A, B, moduli=6)
    assert plan.warning is not None and np.isfinite(plan.predicted_error)
    assert ("its error bound, relative to the rows' scales, predicts more than 16 times native's "
            "error at the smallest sampled entry of the product" in plan.warning)
    assert "far below" not in plan.warning
    # the count the planner takes from the sample's |A||B|, at most the one of its lower bound
    suggested = int(re.search(r"this mode would take moduli=(\d+)\)", plan.warning).group(1))
    assert 6 < suggested <= planned
    assert ozaki.plan(A, B, moduli=suggested).warning is None


# ---- the check's sample -------------------------------------------------------------------------


def sampled_reference(a, bt, tau_a, tau_b, usable_a, usable_b, rows_a, rows_b, m, n,
                      norms=None, lanes=128):
    """ozaki::sampled_magnitudes in Python floats: lane t adds the terms l = t, t + 128, ... in
    turn, then the lanes are added pairwise (csrc/scheme.h, sampled_lane_sum), then the norm
    factors c 2^tau (scale_of of tests/helpers.py) or +inf (csrc/crt.h, sampled_entry)."""
    out = torch.empty(len(rows_a), len(rows_b), dtype=torch.float64)
    for r, i in enumerate(rows_a.tolist()):
        for c, j in enumerate(rows_b.tolist()):
            if not (usable_a[i] and usable_b[j]) or i // m != j // n:
                out[r, c] = math.inf
                continue
            x = [abs(v) * 2.0 ** -tau_a[i] if math.isfinite(v) else 0.0 for v in a[i].tolist()]
            y = [abs(v) * 2.0 ** -tau_b[j] if math.isfinite(v) else 0.0 for v in bt[j].tolist()]
            sums = []
            for t in range(lanes):
                s = 0.0
                for l in range(t, len(x), lanes):
                    s += x[l] * y[l]
                sums.append(s)
            stride = lanes // 2
            while stride:
                for t in range(stride):
                    sums[t] = sums[t] + sums[t + stride]
                stride //= 2
            value = sums[0]
            if norms is not None:
                value = (value * float(scale_of(norms[0][i]) * Fraction(2) ** tau_a[i])
                         * float(scale_of(norms[1][j]) * Fraction(2) ** tau_b[j]))
            out[r, c] = value
    return out


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("with_norms", [False, True], ids=["scheme I", "scheme II"])
def test_sampled_magnitudes_sum_in_one_order_on_every_device(device, dtype, with_norms):
    g = seeded(9)
    a = accuracy.phi_matrix(8, 700, 2.0, generator=g, dtype=dtype)  # two elements of 4 rows
    bt = accuracy.phi_matrix(6, 700, 2.0, generator=g, dtype=dtype)  # two elements of 3 rows
    a[1, 3], a[2, :] = float("inf"), 0.0  # a row holding Inf and a zero row: not usable
    bt[4] *= 2.0 ** -1000 if dtype == torch.float64 else 2.0 ** -100
    stats_a, stats_b = ozaki._ops.row_stats(a), ozaki._ops.row_stats(bt)
    usable_a, usable_b = (stats_a[1] > 0) & ~stats_a[2], (stats_b[1] > 0) & ~stats_b[2]
    norms = ((ozaki._ops.row_norm_scales(a, stats_a[0]), ozaki._ops.row_norm_scales(bt, stats_b[0]))
             if with_norms else None)
    rows_a, rows_b = torch.tensor([6, 2, 3, 0, 1, 3]), torch.tensor([4, 5, 0, 1])
    expected = sampled_reference(a, bt, stats_a[0].tolist(), stats_b[0].tolist(),
                                 usable_a.tolist(), usable_b.tolist(), rows_a, rows_b, 4, 3,
                                 None if norms is None else [x.tolist() for x in norms])
    on_device = [t.to(device) for t in (a, bt, stats_a[0], stats_b[0], usable_a, usable_b,
                                        rows_a, rows_b)]
    got = ozaki._ops.sampled_magnitudes(*on_device, 4, 3,
                                        *([None, None] if norms is None else
                                          [x.to(device) for x in norms]))
    assert_bitwise_equal(got.cpu(), expected)
    # rows 2 (zero) and 1 (Inf) and pairs across the two elements are +inf, the rest positive
    finite = torch.isfinite(expected)
    assert finite.sum() == 8 and (expected[finite] > 0).all()


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_sampled_magnitudes_errors(device):
    a = torch.randn(4, 8, dtype=torch.float64, device=device)
    tau = ozaki._ops.row_stats(a)[0]
    usable = torch.ones(4, dtype=torch.bool, device=device)
    rows = torch.tensor([0, 3], device=device)
    call = ozaki._ops.sampled_magnitudes
    with pytest.raises(RuntimeError, match="rows_a must be a contiguous 1-D int64 tensor"):
        call(a, a, tau, tau, usable, usable, rows.int(), rows, 4, 4)
    with pytest.raises(RuntimeError, match="a and bt must have the same dtype and number of columns"):
        call(a, a[:, :4].contiguous(), tau, tau, usable, usable, rows, rows, 4, 4)
    with pytest.raises(RuntimeError, match="usable_a must be a contiguous 1-D Bool tensor of length 4"):
        call(a, a, tau, tau, usable.int(), usable, rows, rows, 4, 4)
    with pytest.raises(RuntimeError, match="m and n \\(rows per element\\) must be at least 1, got 0"):
        call(a, a, tau, tau, usable, usable, rows, rows, 0, 4)
    with pytest.raises(RuntimeError, match="norm_a and norm_b must be given together"):
        call(a, a, tau, tau, usable, usable, rows, rows, 4, 4, tau, None)
    if device == "cpu":
        with pytest.raises(RuntimeError, match=r"rows_b\[1\] = 4 is not a row of bt \(4 rows\)"):
            call(a, a, tau, tau, usable, usable, rows, torch.tensor([0, 4]), 4, 4)
    else:  # the GPU cannot stop on a value: the entry is NaN
        out = call(a, a, tau, tau, usable, usable, rows, torch.tensor([0, 4], device=device), 4, 4)
        assert out[:, 1].isnan().all() and out[:, 0].isfinite().all()


def kernel_matrix_product(seed):
    """A Gaussian-process kernel matrix exp(-|x_i - x_j|^2 / 2) + I / 100 of points in a cube of
    side 12 (entries spanning hundreds of binades) times right-hand sides: the
    conjugate-gradient program's product (scripts/programs_bench.py)."""
    g = seeded(seed)
    x = torch.rand(300, 3, generator=g, dtype=torch.float64) * 12
    K = torch.exp(-torch.cdist(x, x).square() / 2) + torch.eye(300, dtype=torch.float64) / 100
    return K, torch.randn(300, 8, generator=g, dtype=torch.float64)


ENTRY_BOUND_CASES = {**CASES, "kernel matrix": lambda: kernel_matrix_product(6),
                     "kernel matrix, transposed": lambda: tuple(
                         x.t().contiguous() for x in reversed(kernel_matrix_product(7)))}


def estimates_of(A, B):
    a, bt = row_operands(A, B)
    return Estimates(a, bt, _ops.row_stats(a), _ops.row_stats(bt))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("case", [*ENTRY_BOUND_CASES, "one term", "wide rows of A", "phi 1"])
def test_the_entry_bounds_floor_is_below_it(device, case):
    """Estimates.entry_bound_floor: 2^floor <= exact scheme II's entry bound, with equality for
    a single term (3 x 5: spans 2 and 3, so 2^5 = 32 = the bound's sum), whichever operand has
    fewer rows."""
    if case == "one term":
        A = torch.tensor([[3.0]], dtype=torch.float64)
        B = torch.tensor([[5.0]], dtype=torch.float64)
    elif case == "wide rows of A":
        A, B = huge_meets_tiny(seed=9)[0][:5], huge_meets_tiny(seed=9)[1]
    elif case == "phi 1":
        g = seeded(11)
        A = accuracy.phi_matrix(20, 30, 1.0, generator=g)
        B = accuracy.phi_matrix(30, 40, 1.0, generator=g)
    else:
        A, B = ENTRY_BOUND_CASES[case]()
    est = estimates_of(A.to(device), B.to(device))
    floor = est.entry_bound_floor()
    assert floor is not None
    bound = est.exact_entry_bound()
    assert Fraction(2) ** floor <= bound
    if case == "one term":
        assert floor == 5 and bound >= 32 and bound < 33


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("case", ENTRY_BOUND_CASES)
def test_the_plans_shortcut_past_exact_scheme_two_keeps_the_plan(device, case, monkeypatch):
    """plan_for skips exact scheme II's entry bound where its floor shows that exact scheme II
    needs more moduli than the plan it would replace; the plan is the one made without the
    shortcut, and the shortcut applies to the kernel-matrix products."""
    A, B = (x.to(device) for x in ENTRY_BOUND_CASES[case]())
    with_shortcut = ozaki.plan(A, B)
    asked = []
    full = Estimates.exact_entry_bound_exceeds

    def never(est, count):
        asked.append(full(est, count))
        return False

    monkeypatch.setattr(Estimates, "exact_entry_bound_exceeds", never)
    assert ozaki.plan(A, B) == with_shortcut
    if case.startswith("kernel matrix"):
        assert asked == [True]  # the shortcut applies to it
    # nor does the norm bound's float read past every limit change it
    monkeypatch.setattr(crt, "norm_bound_beyond_every_count", lambda *args: False)
    assert ozaki.plan(A, B) == with_shortcut
