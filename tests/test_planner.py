"""The automatic slice count (slices=None) and ozaki.plan (docs/accuracy.md)."""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

import ozaki
from helpers import assert_bitwise_equal, cpu_and_cuda, phi_pair, seeded
from ozaki import _ops, accuracy, crt, planner
from ozaki.slicing import MAX_SLICES, SIGNIFICAND_BITS, digit_bits_for, pair_count

# Pairs of k around every change of beta (the digit width drops by one at each power of 4).
K_ACROSS_BETA = [16, 17, 64, 65, 256, 257, 1024, 1025, 4096, 4097]
GEMMS = {torch.float64: ozaki.dgemm, torch.float32: ozaki.sgemm}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["dgemm", "sgemm"])
@pytest.mark.parametrize("k", K_ACROSS_BETA)
@pytest.mark.parametrize("phi", [0.1, 0.5, 1.0, 2.0, 4.0])
def test_auto_slice_count_no_worse_than_native(dtype, k, phi):
    A, B = phi_pair(8, k, 8, phi, seed=1000 + k + int(phi * 100), dtype=dtype)
    exact = accuracy.exact_matmul(A, B)
    C, native = GEMMS[dtype](A, B), A @ B
    ours = accuracy.componentwise_errors(C, exact, A, B)
    theirs = accuracy.componentwise_errors(native, exact, A, B)
    assert ours.max() <= theirs.max(), (ours.max(), theirs.max(), ozaki.plan(A, B))
    ours_rel = np.median(accuracy.relative_errors(C, exact))
    theirs_rel = np.median(accuracy.relative_errors(native, exact))
    assert ours_rel <= theirs_rel, (ours_rel, theirs_rel, ozaki.plan(A, B))
    # and the entries are within about one rounding of the exact result where the plan is exact
    plan = ozaki.plan(A, B)
    if plan.exact:
        assert accuracy.ulps_from_nearest(C, exact).max() <= 1


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["dgemm", "sgemm"])
def test_default_is_the_plan(device, dtype):
    A, B = phi_pair(33, 300, 21, 0.5, seed=4, dtype=dtype, device=device)
    plan = ozaki.plan(A, B, backend="fp16")
    assert plan.reason in ("error bound", "exact")
    assert plan.gemms == pair_count(plan.slices, plan.fast)
    assert plan.predicted_error <= 2.0 ** -(24 if dtype == torch.float32 else 53)
    assert_bitwise_equal(GEMMS[dtype](A, B, backend="fp16"),
                         GEMMS[dtype](A, B, backend="fp16", slices=plan.slices, fast=plan.fast))


def test_more_spread_needs_more_slices():
    counts = []
    for phi in (0.1, 1.0, 2.0):
        A, B = phi_pair(16, 1000, 16, phi, seed=8)
        counts.append(ozaki.plan(A, B).gemms)
    assert counts == sorted(counts) and counts[0] < counts[-1]


def test_float32_needs_fewer_slices_than_float64():
    A, B = phi_pair(16, 500, 16, 0.5, seed=9)
    assert ozaki.plan(A.float(), B.float()).gemms < ozaki.plan(A, B).gemms


def test_small_integers_are_multiplied_exactly():
    g = seeded(6)
    A = torch.randint(-50, 50, (20, 70), generator=g).double()
    B = torch.randint(-50, 50, (70, 9), generator=g).double()
    plan = ozaki.plan(A, B, backend="fp16")
    assert plan.exact and plan.slices == 1 and plan.gemms == 1
    # integer sums far below 2^53: exact
    assert torch.equal(ozaki.dgemm(A, B, backend="fp16"), A @ B)


def test_unresolvable_estimate_falls_back_to_an_exact_plan():
    # Row 0 of A and column 0 of B only meet where one side is 2^-30 of its maximum: the estimate
    # cannot see the product, so the plan must not rely on it.
    A = torch.tensor([[1.0, 2.0 ** -30, 0.3], [0.7, 0.1, 0.9]], dtype=torch.float64)
    B = torch.tensor([[2.0 ** -30, 0.4], [1.0, 0.2], [0.0, 0.6]], dtype=torch.float64)
    plan = ozaki.plan(A, B)
    assert plan.backend == "crt" and plan.exact
    assert plan.reason == "exact scheme II: its estimate cannot resolve every entry"
    scheme_one = ozaki.plan(A, B, backend="fp16")
    assert not scheme_one.fast and scheme_one.slices == scheme_one.full_split_slices
    assert scheme_one.exact and scheme_one.reason == "exact (estimate unresolved)"
    # scheme I's exact split is summed in float64, within about one rounding: not "rounded once"
    assert "rounded once" not in str(scheme_one), str(scheme_one)
    assert str(scheme_one).endswith("(every product of the split is exact; their float64 sum is "
                                    "within about one rounding)")
    assert str(plan).endswith("(the exact product, rounded once)")
    exact = accuracy.exact_matmul(A, B)
    assert_bitwise_equal(ozaki.dgemm(A, B), accuracy.round_exact(exact))


def test_fast_mode_with_an_unresolvable_estimate_rounds_every_entry_from_the_exact_product():
    # fast mode drops pairs that the estimate cannot bound: the plan is the correctly rounded one
    A = torch.tensor([[1.0, 2.0 ** -30, 0.3], [0.7, 0.1, 0.9]], dtype=torch.float64)
    B = torch.tensor([[2.0 ** -30, 0.4], [1.0, 0.2], [0.0, 0.6]], dtype=torch.float64)
    plan = ozaki.plan(A, B, fast=True)
    assert plan.fast and plan.rounding == "nearest"
    assert plan.reason.startswith("exact: no truncated split can be shown to meet the error bound "
                                  "in fast mode")
    exact = accuracy.round_exact(accuracy.exact_matmul(A, B))
    assert_bitwise_equal(ozaki.dgemm(A, B, fast=True), exact)


def test_all_pairs_when_only_all_pairs_meets_the_target():
    k, dtype = 1024, torch.float64
    beta = digit_bits_for(k)

    def need(fast, magnitude):
        return planner._smallest(lambda s: planner.meets_target(
            s, fast, k, beta, SIGNIFICAND_BITS[dtype], Fraction(magnitude)), MAX_SLICES)

    # the largest magnitude that fast mode cannot reach within MAX_SLICES while all pairs can
    magnitude = next(2.0 ** -e for e in range(400) if need(True, 2.0 ** -e) is None)
    assert need(False, magnitude) is not None
    plan = planner.auto_plan(k, dtype, 400, magnitude, None)  # rows spanning 400 bits: no exact split
    assert (plan.slices, plan.fast) == (need(False, magnitude), False)
    assert plan.reason == "error bound" and plan.rounding is None


def test_nearest_with_slices_given_is_fast_unless_asked_otherwise():
    A, B = phi_pair(12, 300, 7, 1.0, seed=21)
    assert ozaki.plan(A, B, slices=6, rounding="nearest").fast
    assert not ozaki.plan(A, B, slices=6, fast=False, rounding="nearest").fast
    assert ozaki.plan(A, B, fast=True, rounding="nearest").fast
    exact = accuracy.round_exact(accuracy.exact_matmul(A, B))
    for options in [{"slices": 6}, {"fast": True}, {"fast": False}]:
        assert_bitwise_equal(ozaki.dgemm(A, B, rounding="nearest", **options), exact)


def test_zero_and_nonfinite_rows_do_not_constrain_the_plan():
    A, B = phi_pair(10, 50, 10, 0.5, seed=12)
    reference = ozaki.plan(A, B, backend="fp16")
    A[3] = 0.0
    A[4, 7] = float("nan")
    B[:, 2] = 0.0
    assert ozaki.plan(A, B, backend="fp16").slices <= reference.slices
    A = torch.zeros(4, 5, dtype=torch.float64)
    assert ozaki.plan(A, B[:5], backend="fp16").slices == 1


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("phi", [0.1, 2.0, 4.0])
def test_magnitude_estimate_is_an_exact_lower_bound(device, phi):
    A, B = phi_pair(12, 130, 11, phi, seed=14)
    a, bt = A.to(device), B.t().contiguous().to(device)
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    bound = _ops.magnitude_product(a, bt, stats_a, stats_b).cpu()
    magnitudes = accuracy.abs_product(A, B)
    scale = torch.ldexp(torch.ones(12, 11, dtype=torch.float64),
                        (stats_a[0].cpu()[:, None] + stats_b[0].cpu()[None, :]).to(torch.float64))
    true_value = magnitudes / scale
    assert (bound.double() <= true_value).all()
    # coarse, but not uselessly so: within a factor 2^12 for these inputs wherever positive
    assert (bound > 0).float().mean() > 0.9
    positive = bound > 0
    assert (true_value[positive] / bound.double()[positive]).max() < 2.0 ** 12


@pytest.mark.cuda
@pytest.mark.parametrize("phi", [0.1, 1.0, 4.0])
@pytest.mark.parametrize("k", [7, 257, 4097])
def test_cpu_and_cuda_plan_the_same(phi, k):
    A, B = phi_pair(40, k, 30, phi, seed=k + int(phi))
    for dtype in (torch.float64, torch.float32):
        A_, B_ = A.to(dtype), B.to(dtype)
        assert ozaki.plan(A_, B_) == ozaki.plan(A_.cuda(), B_.cuda())
        a, bt = A_.contiguous(), B_.t().contiguous()
        cpu = _ops.magnitude_product(a, bt, _ops.row_stats(a), _ops.row_stats(bt))
        ac, btc = a.cuda(), bt.cuda()
        gpu = _ops.magnitude_product(ac, btc, _ops.row_stats(ac), _ops.row_stats(btc))
        assert_bitwise_equal(cpu, gpu)
        assert_bitwise_equal(GEMMS[dtype](A_, B_), GEMMS[dtype](A_.cuda(), B_.cuda()))


def test_plan_reports_the_native_level_and_describes_itself():
    A, B = phi_pair(8, 100, 8, 0.5, seed=15)
    plan = ozaki.plan(A, B, backend="fp16")
    assert plan.native_level == pytest.approx(math.sqrt(100) * 2.0 ** -53)
    text = str(plan)
    assert f"{plan.slices} slices" in text and f"{plan.gemms} FP16 GEMMs" in text
    nearest = ozaki.plan(A, B, backend="fp16", rounding="nearest")
    assert nearest.rounding == "nearest" and "rounded once" in str(nearest)
    fixed = ozaki.plan(A, B, backend="fp16", slices=5)
    assert fixed.slices == 5 and fixed.fast and fixed.reason == "requested"


@pytest.mark.parametrize("wide", [False, True], ids=["scheme_two", "wide"])
@pytest.mark.parametrize("k", [1, 2, 5, 16, 17, 1000, 1025, 65536, 131071])
def test_fewest_moduli_is_the_first_count_that_meets_the_target(k, wide):
    """crt.fewest_moduli's bisection gives the count that trying 1, 2, ... in turn gives, for
    targets at, just above and just below every count's predicted error, and random ones."""
    def first_count(target):
        if wide:
            return next((n for n in range(1, crt.MAX_EXACT_MODULI + 1)
                         if crt.wide_scale_bits(n, k) is not None
                         and crt.wide_predicted_error(n, k) <= target), None)
        return next((n for n in range(crt.smallest_moduli(k), crt.MAX_MODULI + 1)
                     if crt.predicted_error(n, k) <= target), None)

    if wide:
        errors = [crt.wide_predicted_error(n, k) for n in range(1, crt.MAX_EXACT_MODULI + 1)
                  if crt.wide_scale_bits(n, k) is not None]
    else:
        errors = [crt.predicted_error(n, k)
                  for n in range(crt.smallest_moduli(k), crt.MAX_MODULI + 1)]
    tiny = Fraction(1, 2 ** 400)
    g = seeded(k)
    targets = [e + d for e in errors for d in (-tiny, 0, tiny)]
    targets += [Fraction(float(x)) / 2 ** int(b) for x, b in
                zip(torch.rand(200, generator=g), torch.randint(0, 400, (200,), generator=g))]
    targets += [Fraction(0), Fraction(10)]
    for target in targets:
        assert crt.fewest_moduli(k, target, wide) == first_count(target)


def test_norm_bound_shortcut_never_contradicts_the_exact_count():
    """crt.norm_bound_needs_more, read from the float product of the two norms, is True only where
    the exact norm bound (Fractions) needs more than `count` moduli and at most 40: norms whose
    product lies a rounding either side of every limit, and random ones over 600 binades."""
    def exact_count(a, b):
        return crt.exact_moduli(Fraction(a) * Fraction(b) * crt.NORM_BOUND_MARGIN)

    pairs = []
    for count in range(1, crt.MAX_EXACT_MODULI + 1):
        limit = float(crt.exact_limit(count))
        for ulps in range(-3, 4):
            x = limit
            for _ in range(abs(ulps)):
                x = math.nextafter(x, math.copysign(math.inf, ulps))
            pairs += [(x, 1.0), (1.0, x), (math.sqrt(x), math.sqrt(x))]
    g = seeded(31)
    exponents = torch.randint(-300, 300, (2000, 2), generator=g).tolist()
    pairs += [(math.ldexp(1 + u, e), math.ldexp(1 + v, f)) for (e, f), (u, v) in
              zip(exponents, torch.rand(2000, 2, generator=g, dtype=torch.float64).tolist())]
    taken = 0
    for a, b in pairs:
        count = exact_count(a, b)
        for most in range(1, crt.MAX_EXACT_MODULI + 1):
            if crt.norm_bound_needs_more(a, b, most):
                taken += 1
                assert count is not None and count > most, (a, b, most, count)
    assert taken > 1000  # the shortcut does apply


def _around_every_limit(ulps=3):
    """Floats within `ulps` units either side of every exact-scheme-II limit, and random ones over
    600 binades."""
    values = []
    for count in range(1, crt.MAX_EXACT_MODULI + 1):
        x = float(crt.exact_limit(count))
        below = above = x
        values.append(x)
        for _ in range(ulps):
            below, above = math.nextafter(below, 0.0), math.nextafter(above, math.inf)
            values += [below, above]
    g = seeded(37)
    values += [math.ldexp(1 + u, e) for u, e in
               zip(torch.rand(2000, generator=g, dtype=torch.float64).tolist(),
                   torch.randint(-300, 300, (2000,), generator=g).tolist())]
    return values


def test_float_limit_shortcuts_never_contradict_the_exact_count():
    """crt.above_exact_limit(x, count) is True only where x exceeds exact_limit(count) exactly, and
    crt.norm_bound_beyond_every_count(a, b) only where the exact norm bound needs more than 40
    moduli; both apply to floats just past the limits."""
    values = _around_every_limit()
    taken = 0
    for x in values:
        for count in range(1, crt.MAX_EXACT_MODULI + 1):
            if crt.above_exact_limit(x, count):
                taken += 1
                assert Fraction(x) > crt.exact_limit(count), (x, count)
    assert taken > 1000
    beyond = 0
    for x in values:
        for a, b in ((x, 1.0), (1.0, x), (math.sqrt(x), math.sqrt(x)), (x, 2.0 ** 300)):
            if crt.norm_bound_beyond_every_count(a, b):
                beyond += 1
                assert crt.exact_moduli(Fraction(a) * Fraction(b) * crt.NORM_BOUND_MARGIN) is None
    limit = float(crt.exact_limit(crt.MAX_EXACT_MODULI))
    assert crt.norm_bound_beyond_every_count(math.nextafter(limit, math.inf) * 1.000001, 1.0)
    assert not crt.norm_bound_beyond_every_count(limit, 1.0)
    assert beyond > 500


@pytest.mark.parametrize("phi", [0.1, 0.5, 2, 4])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_plans_are_the_same_without_the_norm_bound_shortcut(phi, dtype, monkeypatch):
    """The default plan (and the correctly rounded one) is the same with crt.norm_bound_needs_more
    as without it."""
    for seed, (m, k, n) in enumerate([(20, 30, 10), (8, 500, 9), (33, 4, 17)]):
        A, B = phi_pair(m, k, n, phi, 40 + seed, dtype)
        plans = [ozaki.plan(A, B), ozaki.plan(A, B, rounding="nearest")]
        with monkeypatch.context() as patch:
            patch.setattr(crt, "norm_bound_needs_more", lambda *args: False)
            assert [ozaki.plan(A, B), ozaki.plan(A, B, rounding="nearest")] == plans


def _magnitudes(seed):
    """Positive finite floats over the whole range: random, subnormal, and the extremes."""
    g = seeded(seed)
    random = [float(x) * 2.0 ** int(e) for x, e in
              zip(torch.rand(300, generator=g) + 0.5, torch.randint(-1080, 1024, (300,), generator=g))]
    return [m for m in random if 0 < m < math.inf] + [
        5e-324, 2.0 ** -1022, 2.0 ** -966, 2.0 ** -965, 1.0, 1.7976931348623157e308]


@pytest.mark.parametrize("wide", [False, True], ids=["scheme_two", "wide"])
@pytest.mark.parametrize("k", [1, 17, 1025, 131071])
def test_float_planning_agrees_with_fractions(k, wide):
    """The planner's float shortcuts (targets scaled exactly, errors held as exact floats, one
    correctly rounded division) give the counts and levels of the Fraction arithmetic."""
    counts = range(1, crt.MAX_EXACT_MODULI + 1) if wide else range(crt.smallest_moduli(k),
                                                                    crt.MAX_MODULI + 1)
    counts = [n for n in counts if not wide or crt.wide_scale_bits(n, k) is not None]
    error = crt.wide_predicted_error if wide else crt.predicted_error
    for magnitude in _magnitudes(k):
        exact_target = Fraction(magnitude) / 2 ** 56
        assert (crt.fewest_moduli(k, planner._scaled_down(magnitude, 56), wide)
                == crt.fewest_moduli(k, exact_target, wide))
        for n in counts[::7]:
            try:
                expected = float(error(n, k) / Fraction(magnitude))
            except OverflowError:  # past the float64 range: inf (a subnormal magnitude)
                assert crt.error_level(n, k, magnitude, wide) == math.inf
                continue
            assert crt.error_level(n, k, magnitude, wide) == expected
