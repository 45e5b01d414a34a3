"""Internal operators (torch.ops.ozaki, ozaki._ops) fed values outside their contract, as a caller of
the operators or a stale kept operand can: they raise an error naming the value, or give NaN where
no answer exists, and never read or write outside their memory, loop without end or turn an
undefined conversion into a number. The CPU and CUDA backends share this code (csrc/*.h)."""

import subprocess
import sys
import textwrap

import pytest
import torch

from helpers import assert_bitwise_equal, cpu_and_cuda, seeded
from ozaki import _C, _ops, accuracy


def _rows(device, seed, shape=(4, 8)):
    g = seeded(seed)
    return (torch.randn(shape, dtype=torch.float64, generator=g).to(device),
            torch.randn(shape, dtype=torch.float64, generator=g).to(device))


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("span", [-60, 0, 1, 100000, 2 ** 30])
def test_exact_dot_products_do_not_trust_the_bit_spans(device, span):
    """rounding="nearest" computes the entries its slices leave undecided exactly; where the bit
    spans passed do not describe the rows (a stale kept operand, a caller's values), the exact
    sums still land inside their accumulator, and the result is the correctly rounded product."""
    a, bt = _rows(device, seed=span % 1000)
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    wrong = torch.full_like(stats_a[1], span)
    C = torch.ops.ozaki.gemm_slices(a, bt, stats_a[0], stats_b[0], wrong, wrong, stats_a[2],
                                    stats_b[2], 1, True, True, False, 0)
    expected = accuracy.round_exact(accuracy.exact_matmul(a.cpu(), bt.cpu().T))
    assert_bitwise_equal(C.cpu(), expected)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_an_empty_magnitude_product_checks_its_inner_dimension(device):
    """magnitude_product refuses total_k past 2^22 on every device, empty operands included."""
    a = torch.zeros((0, 4), dtype=torch.float64, device=device)
    bt = torch.ones((3, 4), dtype=torch.float64, device=device)
    stats_a, stats_b = _ops.row_stats(a), _ops.row_stats(bt)
    with pytest.raises(RuntimeError, match="too large for the magnitude estimate"):
        _ops.magnitude_product(a, bt, stats_a, stats_b, 2 ** 22 + 1)


_HUGE_INNER = textwrap.dedent("""
    import torch
    from ozaki import _ops
    a, bt = torch.randn(2, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    sa, sb = _ops.row_stats(a), _ops.row_stats(bt)
    levels = _ops.slice_levels(a, bt, sa[0], sb[0], 1, True, True, 4)
    # each call with its first refused k (past 2^22 for FP16 digits and the estimate's grid, 2^29
    # for INT8 digits)
    calls = {
        "magnitude_product": (lambda k: _ops.magnitude_product(a, bt, sa, sb, k), 2 ** 22 + 1),
        "slice_levels fp16": (lambda k: _ops.slice_levels(a, bt, sa[0], sb[0], 2, False, False, k),
                              2 ** 22 + 1),
        "slice_levels int8": (lambda k: _ops.slice_levels(a, bt, sa[0], sb[0], 2, False, True, k),
                              2 ** 29),
        "round_levels int8": (lambda k: _ops.round_levels(levels, sa, sb, 1, True, True, k, True,
                                                          torch.float64), 2 ** 29),
    }
    for name, (call, first) in calls.items():
        for k in (first, 2 ** 62 + 1, 2 ** 63 - 1):
            try:
                call(k)
            except RuntimeError as error:
                assert "too large" in str(error) and str(k) in str(error), (name, k, str(error))
            else:
                raise AssertionError(f"{name} accepted total_k = {k}")
    print("ok")
""")


def test_inner_dimensions_past_every_limit_raise():
    """total_k up to 2^63 - 1: a clear error, where the digit width's ceil(log2) looped without
    end past 2^62 and k + 1 overflowed. In a child process, so that a loop cannot stall the run."""
    done = subprocess.run([sys.executable, "-c", _HUGE_INNER], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("level_sum", [float("nan"), float("inf"), 1e300, -1e300])
def test_level_sums_no_slice_product_gives_round_to_nan(device, level_sum):
    """round_levels(nearest=True) of level sums that no slice product gives (non-finite, or past
    2^62 units): NaN in that entry, decided, and the other entries as before."""
    a, bt = _rows(device, seed=7)
    sa, sb = _ops.row_stats(a), _ops.row_stats(bt)
    levels = _ops.slice_levels(a, bt, sa[0], sb[0], 2, True, True, a.shape[1])
    before, _ = _ops.round_levels(levels, sa, sb, 2, True, True, a.shape[1], True, torch.float64)
    levels[0, 1, 2] = level_sum
    C, undecided = _ops.round_levels(levels, sa, sb, 2, True, True, a.shape[1], True,
                                     torch.float64)
    assert C[1, 2].isnan() and not undecided[1, 2]
    others = torch.ones_like(undecided)
    others[1, 2] = False
    assert_bitwise_equal(C[others], before[others])


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_a_nan_column_exponent_rules_exact_scheme_two_out(device):
    """crt_entry_bound_sum counts a NaN exponent as the largest term, 2^900, where it read as 2^0
    and gave a bound below the true one."""
    u = torch.tensor([[float("nan"), 1.0]], dtype=torch.float64, device=device)
    v = torch.zeros_like(u)
    assert _ops.crt_entry_bound_sum(u, v).item() >= 2.0 ** 900


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_kept_plan_reads_of_a_right_operand_without_rows(device):
    """crt_kept_plan_reads with a's column exponents and a bt of no rows: its column exponents are
    all "no entry", so the entry bound's sum is 0 (it raised on an undefined tensor)."""
    import ozaki

    A = torch.randn(3, 20, dtype=torch.float64, device=device)
    with ozaki.prepare(A) as kept:
        stats_a, norm_a = kept.stats_and_norms()
        exponents = torch.zeros(20, dtype=torch.int64, device=device)
        values = _ops.crt_kept_plan_reads(kept.rows(), stats_a, norm_a, kept.magnitude_digits(),
                                          kept.row_bounds(), exponents,
                                          torch.empty((0, 20), dtype=torch.float64,
                                                      device=device))[2]
    assert values[-1].item() == 0.0


@pytest.mark.parametrize("function, arguments", [
    ("copy_to_host", (0, 0, 0, -1)),
    ("graph_result_sites", (0, 0, 0, -8)),
])
def test_raw_copies_refuse_a_negative_byte_count(function, arguments):
    with pytest.raises(ValueError, match=f"ozaki._C.{function}: bytes must be >= 0, got "
                                         f"{arguments[-1]}"):
        getattr(_C, function)(*arguments)


_OPS = torch.ops.ozaki
_INT_MAX, _INT_MIN = 2 ** 31 - 1, -2 ** 31


def _ints(device, *values, dtype=torch.int32):
    return torch.tensor(values, dtype=dtype, device=device)


def _flags(device, *values):
    return torch.tensor(values, dtype=torch.bool, device=device)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_norm_sums_saturate_entries_above_the_given_tau(device):
    """row_norm_square_sums / row_norm_scales with a tau below a row's exponent: each entry counts
    as |a| 2^-tau = 1, its square 2^32 units (an entry past 2^(tau + 48) was an undefined
    conversion and smaller ones wrapped to 0, the row reading as a zero row)."""
    a = torch.tensor([[2.0 ** 17, 1e300]], dtype=torch.float64, device=device)
    tau = _ints(device, 0)
    assert _OPS.row_norm_square_sums(a, tau).tolist() == [2 ** 33]
    # norm_scale_code(2^33, 0): e = 17, f = 6 (22^2 2^33 <= 2^42 < 23^2 2^33)
    assert _OPS.row_norm_scales(a, tau).tolist() == [-16 + 6]


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_magnitude_digits_stay_in_range_for_any_norm_code(device):
    """crt_magnitude_digits with tau and norm codes that put 2^(tau + e + g) outside the normal
    range: the exponent saturates, digits stay in [0, 127] (127 above, 0 below; pow2 wrapped to a
    negative factor, or 0 * Inf gave NaN), and crt_magnitude stays nonnegative."""
    a = torch.tensor([[1.0, 0.5, 0.25, 0.125]], dtype=torch.float64, device=device)
    gain = 5 + (2 + 1) // 2  # crt_magnitude_gain(4)
    high = _OPS.crt_magnitude_digits(a, _ints(device, 0), _ints(device, 16 * (1100 - gain + 4)), 0)
    assert high.tolist() == [[127] * 4]
    low = _OPS.crt_magnitude_digits(a, _ints(device, 1100),
                                    _ints(device, 16 * (1024 - 1100 - gain + 4)), 0)
    assert low.tolist() == [[0] * 4]
    for code in (16 * (1100 - gain + 4), 2 ** 31 - 16, _INT_MIN):
        for tau in (0, _INT_MAX, _INT_MIN):
            digits = _OPS.crt_magnitude_digits(a, _ints(device, tau), _ints(device, code), 0)
            assert digits.min().item() >= 0 and digits.max().item() <= 127, (tau, code)
    tau, _, _, norm = _OPS.row_stats_with_norm_scales(a)
    magnitude = _OPS.crt_magnitude(a, a, _ints(device, 0), tau,
                                   _ints(device, 16 * (1100 - gain + 4)), norm,
                                   _flags(device, True), _flags(device, True))
    assert magnitude.item() >= 0.0


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("code", [-16 + 16 * 1100, -16 + 16 * 3000, _INT_MAX])
def test_sampled_norm_factors_saturate(device, code):
    """sampled_magnitudes with a norm code whose c 2^tau is past float64's range: the factor is
    +Inf, so the entry is +Inf (pow2 wrapped, giving negative or tiny values)."""
    x = torch.ones(1, 2, dtype=torch.float64, device=device)
    rows = _ints(device, 0, dtype=torch.int64)
    args = (x, x, _ints(device, 1), _ints(device, 1), _flags(device, True), _flags(device, True),
            rows, rows, 1, 1)
    assert _OPS.sampled_magnitudes(*args, _ints(device, -16), _ints(device, -16)).item() == 0.5
    assert _OPS.sampled_magnitudes(*args, _ints(device, code), _ints(device, -16)).item() == \
        float("inf")


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("given, saturated", [(_INT_MAX, 2 ** 30), (_INT_MAX - 5, 2 ** 30),
                                              (_INT_MIN, -2 ** 30)])
def test_exact_scale_exponents_saturate(device, given, saturated):
    """Exact scheme II's row exponents are held to [-2^30, 2^30], far past any finite entry's
    range, so an entry's exponent plus its row's stays an int (it overflowed near INT_MAX)."""
    a = torch.tensor([[2.0, 3.0, -5.0, 2.0 ** 900]], dtype=torch.float64, device=device)
    residues = _OPS.crt_left_residues(a, _ints(device, given), 8, True)
    assert torch.equal(residues, _OPS.crt_left_residues(a, _ints(device, saturated), 8, True))


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_per_row_codes_saturate_at_the_int32_range(device):
    """The per-row code arithmetic is done in int64 and saturated to int32 (it overflowed)."""
    zero = torch.zeros(1, 2, dtype=torch.float64, device=device)
    assert _OPS.row_norm_scales(zero, _ints(device, 2 ** 28)).tolist() == [_INT_MIN]
    assert _OPS.row_norm_scales(zero, _ints(device, -2 ** 28)).tolist() == [_INT_MAX]
    assert _OPS.crt_row_scales(_ints(device, _INT_MAX - 15), _ints(device, 0), _ints(device, 0),
                               62).tolist() == [_INT_MAX]
    assert _OPS.crt_row_scales(_ints(device, _INT_MIN), _ints(device, 0), _ints(device, _INT_MAX),
                               0).tolist() == [_INT_MIN]
    assert _OPS.crt_wide_exponents(_ints(device, 0), _ints(device, -5), _ints(device, _INT_MAX),
                                   _flags(device, False), 0).tolist() == [_INT_MAX]
    assert _OPS.crt_wide_exponents(_ints(device, 0), _ints(device, 5), _ints(device, _INT_MIN),
                                   _flags(device, False), 0).tolist() == [_INT_MIN]


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("rows_a, rows_b, m, n", [(3, 3, 2, 2), (4, 3, 2, 1), (4, 4, 3, 2)])
def test_sampled_rows_per_element_must_tile_the_operands(device, rows_a, rows_b, m, n):
    """sampled_magnitudes: m and n divide the operands' rows into the same number of elements (a
    last partial element was silently formed)."""
    a = torch.ones(rows_a, 2, dtype=torch.float64, device=device)
    bt = torch.ones(rows_b, 2, dtype=torch.float64, device=device)
    index = _ints(device, 0, dtype=torch.int64)
    with pytest.raises(RuntimeError, match=f"ozaki::sampled_magnitudes: .*m = {m}.*n = {n}"):
        _OPS.sampled_magnitudes(a, bt, _ints(device, *[1] * rows_a), _ints(device, *[1] * rows_b),
                                _flags(device, *[True] * rows_a), _flags(device, *[True] * rows_b),
                                index, index, m, n, None, None)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_plan_reads_check_their_own_arguments(device):
    """crt_plan_reads and crt_kept_plan_reads name themselves in their errors (a 0-d operand gave
    an IndexError, k past 2^17 was blamed on the operators they compose), and crt_plan_reads reads
    B's columns in place on every device, as CUDA's does."""
    scalar = torch.tensor(1.0, dtype=torch.float64, device=device)
    with pytest.raises(RuntimeError, match="ozaki::crt_plan_reads: a must be 2-D"):
        _OPS.crt_plan_reads(scalar, scalar)
    x = torch.randn(4, 6, dtype=torch.float64, generator=seeded(3)).to(device)
    y = torch.randn(6, 5, dtype=torch.float64, generator=seeded(4)).to(device)
    in_place = _OPS.crt_plan_reads(x, y.t())
    for got, expected in zip(in_place, _OPS.crt_plan_reads(x, y.t().contiguous())):
        assert torch.equal(got, expected)
    with pytest.raises(RuntimeError, match="ozaki::crt_plan_reads: bt must be contiguous or the "
                                           "transpose"):
        _OPS.crt_plan_reads(x, torch.randn(12, 5, dtype=torch.float64).to(device)[::2])
    k = 2 ** 17 + 3
    wide = torch.ones(1, k, dtype=torch.float32, device=device)
    with pytest.raises(RuntimeError, match=f"ozaki::crt_plan_reads: inner dimension k = {k}"):
        _OPS.crt_plan_reads(wide, wide)
    tau, span, nonfinite, norm = _OPS.row_stats_with_norm_scales(wide)
    digits = torch.zeros(1, (k + 15) // 16 * 16, dtype=torch.int8, device=device)
    with pytest.raises(RuntimeError, match=f"ozaki::crt_kept_plan_reads: inner dimension k = {k}"):
        _OPS.crt_kept_plan_reads(wide, tau, span, nonfinite, _flags(device, True), norm, digits,
                                 torch.zeros(2, dtype=torch.float64, device=device), None, wide)
