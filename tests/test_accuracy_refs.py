"""Tests for ozaki.accuracy: exact references, correct rounding, metrics, generators."""

import hashlib
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import torch

from ozaki.accuracy import (
    abs_product,
    componentwise_error,
    componentwise_errors,
    correctly_rounded_share,
    dot_condition,
    exact_matmul,
    exponent_range_matrix,
    gendot_matrices,
    phi_matrix,
    relative_errors,
    round_exact,
    sample_entries,
    ulps_from_nearest,
)

F64_MAX = Fraction(torch.finfo(torch.float64).max)
F32_MAX = Fraction(torch.finfo(torch.float32).max)
TWO = Fraction(2)


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def fraction_triple_loop(A: torch.Tensor, B: torch.Tensor) -> np.ndarray:
    """The obvious exact product, for comparison with the vectorised one."""
    a, b = A.double().tolist(), B.double().tolist()
    m, k, n = len(a), len(b), len(b[0])
    result = np.empty((m, n), dtype=object)
    for i in range(m):
        for j in range(n):
            result[i, j] = sum((Fraction(a[i][l]) * Fraction(b[l][j]) for l in range(k)), Fraction(0))
    return result


def subnormal_matrix(rows: int, cols: int, generator: torch.Generator, dtype=torch.float64) -> torch.Tensor:
    """Mix of subnormals (several sizes), tiny normals, zeros and -0.0."""
    tiny = torch.finfo(dtype).smallest_normal
    scale = torch.rand(rows, cols, generator=generator, dtype=torch.float64) * 2 - 1
    powers = torch.randint(0, 30, (rows, cols), generator=generator).double()
    values = (scale * tiny * torch.pow(2.0, -powers)).to(dtype)
    values[0, 0] = 0.0
    values[-1, -1] = -0.0
    values[0, -1] = tiny  # smallest normal next to subnormals
    return values


# ---------------------------------------------------------------------------
# exact_matmul
# ---------------------------------------------------------------------------


F32 = torch.float32


def _pair(make_left, make_right):
    return lambda g: (make_left(g), make_right(g))


def _reference_inputs():
    """Named (A, B) builders for the int-vs-mpmath agreement test."""
    cases = {}
    for phi in (0.1, 1.0, 4.0):
        for k in (1, 5, 64):
            cases[f"phi{phi}-k{k}"] = _pair(
                lambda g, phi=phi, k=k: phi_matrix(6, k, phi, g),
                lambda g, phi=phi, k=k: phi_matrix(k, 5, phi, g),
            )
    cases["exprange-1e300"] = _pair(
        lambda g: exponent_range_matrix(5, 64, -300, 300, g),
        lambda g: exponent_range_matrix(64, 4, -300, 300, g),
    )
    cases["exprange-subnormal-to-huge"] = _pair(
        lambda g: exponent_range_matrix(4, 5, -323, 307, g),
        lambda g: exponent_range_matrix(5, 4, -323, 307, g),
    )
    cases["subnormal"] = _pair(lambda g: subnormal_matrix(5, 64, g), lambda g: subnormal_matrix(64, 6, g))
    cases["subnormal-times-huge"] = _pair(
        lambda g: subnormal_matrix(4, 5, g),
        lambda g: exponent_range_matrix(5, 4, 290, 307, g),
    )
    cases["float32-phi4"] = _pair(
        lambda g: phi_matrix(5, 64, 4.0, g, dtype=F32),
        lambda g: phi_matrix(64, 5, 4.0, g, dtype=F32),
    )
    cases["float32-exprange"] = _pair(
        lambda g: exponent_range_matrix(4, 5, -44, 37, g, dtype=F32),
        lambda g: exponent_range_matrix(5, 4, -44, 37, g, dtype=F32),
    )
    cases["float32-subnormal"] = _pair(
        lambda g: subnormal_matrix(4, 64, g, F32),
        lambda g: subnormal_matrix(64, 4, g, F32),
    )
    cases["mixed-dtypes"] = _pair(
        lambda g: phi_matrix(4, 5, 1.0, g, dtype=F32),
        lambda g: phi_matrix(5, 3, 1.0, g),
    )
    return cases


REFERENCE_INPUTS = _reference_inputs()


@pytest.mark.parametrize("make_inputs", list(REFERENCE_INPUTS.values()), ids=list(REFERENCE_INPUTS))
def test_int_and_mpmath_references_agree_exactly(make_inputs):
    A, B = make_inputs(seeded(7))
    by_int = exact_matmul(A, B, method="int")
    by_mpmath = exact_matmul(A, B, method="mpmath")
    assert by_int.shape == (A.shape[0], B.shape[1])
    assert all(isinstance(v, Fraction) for v in by_int.flat)
    assert all(isinstance(v, Fraction) for v in by_mpmath.flat)
    assert (by_int == by_mpmath).all()


def test_exact_matmul_matches_fraction_triple_loop():
    A = torch.tensor(
        [[1.5, -0.0, 2.0**-1074, 1e300], [3.0, 0.1, -7.25, 2.0**-1022], [0.0, 0.0, 0.0, 0.0]],
        dtype=torch.float64,
    )
    B = torch.tensor([[2.0, -1.0], [5e-324, 0.3], [1e300, 4.0], [-1e-300, 2.0**1000]], dtype=torch.float64)
    expected = fraction_triple_loop(A, B)
    for method in ("int", "mpmath"):
        assert (exact_matmul(A, B, method=method) == expected).all()
    A32, B32 = A[:2, :2].float(), B[:2].float()
    assert (exact_matmul(A32, B32) == fraction_triple_loop(A32, B32)).all()


def test_exact_matmul_is_exact_where_floating_point_is_not():
    # 1e300 - 1e300 cancels; the 1 and the 2**-80 must survive exactly.
    A = torch.tensor([[1e300, 1.0, -1e300, 2.0**-80]], dtype=torch.float64)
    B = torch.ones(4, 1, dtype=torch.float64)
    # The widest possible product span: ~2**2046 against ~2**-2148.
    A_wide = torch.tensor([[2.0**1023, 2.0**-1074]], dtype=torch.float64)
    B_wide = torch.tensor([[2.0**1023], [-(2.0**-1074)]], dtype=torch.float64)
    for method in ("int", "mpmath"):
        assert exact_matmul(A, B, method=method)[0, 0] == 1 + TWO**-80
        assert exact_matmul(A_wide, B_wide, method=method)[0, 0] == TWO**2046 - TWO**-2148


def test_exact_matmul_handles_zero_rows_and_negative_zeros():
    A = torch.tensor([[-0.0, -0.0], [1.0, -0.0]], dtype=torch.float64)
    B = torch.tensor([[-0.0, 3.0], [2.0, -0.0]], dtype=torch.float64)
    for method in ("int", "mpmath"):
        E = exact_matmul(A, B, method=method)
        assert E.tolist() == [[Fraction(0), Fraction(0)], [Fraction(0), Fraction(3)]]
        # an empty inner dimension is an empty sum
        empty = exact_matmul(torch.ones(2, 0, dtype=torch.float64), torch.ones(0, 3), method=method)
        assert empty.tolist() == [[Fraction(0)] * 3] * 2


@pytest.mark.parametrize("method", ["int", "mpmath"])
def test_rows_cols_subset_is_the_submatrix_of_the_full_result(method):
    g = seeded(3)
    A, B = phi_matrix(7, 9, 2.0, g), phi_matrix(9, 6, 2.0, g)
    full = exact_matmul(A, B)
    rows, cols = [0, 4, 6], [1, 5]
    subset = exact_matmul(A, B, method=method, rows=rows, cols=cols)
    assert subset.shape == (3, 2)
    assert (subset == full[np.ix_(rows, cols)]).all()
    # Unsorted indices and tensors of indices are honoured as given.
    reordered = exact_matmul(A, B, method=method, rows=torch.tensor([6, 0]), cols=(5,))
    assert (reordered == full[np.ix_([6, 0], [5])]).all()


def test_exact_matmul_rejects_bad_inputs():
    good = torch.ones(2, 3, dtype=torch.float64)
    other = torch.ones(3, 2, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"exact_matmul: A must be a torch.Tensor, got list"):
        exact_matmul([[1.0]], other)
    with pytest.raises(TypeError, match=r"exact_matmul: B must be torch.float64 or torch.float32, got torch.int64"):
        exact_matmul(good, torch.ones(3, 2, dtype=torch.int64))
    with pytest.raises(TypeError, match=r"exact_matmul: A must be torch.float64 or torch.float32, got torch.float16"):
        exact_matmul(good.half(), other)
    with pytest.raises(ValueError, match=r"exact_matmul: A must be 2-D, got 1-D with shape"):
        exact_matmul(torch.ones(3, dtype=torch.float64), other)
    for bad in (math.inf, -math.inf, math.nan):
        with pytest.raises(ValueError, match=r"exact_matmul: B must contain only finite values"):
            exact_matmul(good, torch.tensor([[1.0, 2.0], [bad, 0.0], [0.0, 0.0]], dtype=torch.float64))
    with pytest.raises(ValueError, match=r"exact_matmul: inner sizes of A \(2, 3\) and B \(2, 2\)"):
        exact_matmul(good, torch.ones(2, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"exact_matmul: method must be 'int' or 'mpmath', got 'foo'"):
        exact_matmul(good, other, method="foo")
    with pytest.raises(ValueError, match=r"exact_matmul: rows contains index 2, outside the valid range \[0, 2\)"):
        exact_matmul(good, other, rows=[0, 2])
    with pytest.raises(ValueError, match=r"exact_matmul: cols contains index -1"):
        exact_matmul(good, other, cols=[-1])
    with pytest.raises(TypeError, match=r"exact_matmul: rows must hold integers"):
        exact_matmul(good, other, rows=[0.5])
    with pytest.raises(TypeError, match=r"exact_matmul: cols must hold integers"):
        exact_matmul(good, other, cols=torch.tensor([1.0]))
    with pytest.raises(ValueError, match=r"exact_matmul: rows must be a 1-D sequence"):
        exact_matmul(good, other, rows=[[0]])
    # integers of any kind are read as the values they are: no wrap to int64
    assert np.array_equal(exact_matmul(good, other, rows=np.array([1, 0], dtype=object)),
                          exact_matmul(good, other, rows=[1, 0]))
    for huge in ([2 ** 64], np.array([2 ** 63], dtype=np.uint64)):
        with pytest.raises(ValueError, match=r"exact_matmul: rows contains index "
                                             f"{huge[0]}, outside the valid range"):
            exact_matmul(good, other, rows=huge)


# ---------------------------------------------------------------------------
# round_exact
# ---------------------------------------------------------------------------


def rounded_scalar(value, dtype=torch.float64) -> float:
    return round_exact(np.array([[value]], dtype=object), dtype=dtype)[0, 0].item()


def same_float(a: float, b: float) -> bool:
    """Equal values AND equal signs (so -0.0 is not +0.0)."""
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


F64_CASES = [
    # ties to even
    (1 + TWO**-53, 1.0),
    (1 + 3 * TWO**-53, 1 + 2.0**-51),
    (-(1 + TWO**-53), -1.0),
    (1 + TWO**-53 + TWO**-200, 1 + 2.0**-52),  # just above the tie
    (Fraction(1, 3), 1 / 3),
    # subnormal grid
    (TWO**-1075, 0.0),  # tie between 0 and the smallest subnormal: even is 0
    (TWO**-1075 + TWO**-3000, 2.0**-1074),
    (3 * TWO**-1075, 2.0**-1073),  # tie between 1 and 2 subnormal units: 2
    (5 * TWO**-1076, 2.0**-1074),  # 1.25 units
    (-(TWO**-1075 + TWO**-3000), -(2.0**-1074)),
    (-(TWO**-1080), -0.0),  # negative underflow keeps its sign
    (TWO**-1022 - TWO**-1075, 2.0**-1022),  # tie at the normal boundary: even is 2**-1022
    (TWO**-1022 - TWO**-1074, 2.0**-1022 - 2.0**-1074),  # largest subnormal, exact
    (Fraction(0), 0.0),
    (Fraction(-0), 0.0),
    # largest finite number and overflow (half ulp at the top is 2**970)
    (F64_MAX, float(F64_MAX)),
    (F64_MAX + TWO**970 - TWO**-100, float(F64_MAX)),
    (F64_MAX + TWO**970, math.inf),  # the tie goes to infinity
    (-(F64_MAX + TWO**970), -math.inf),
    (TWO**1024, math.inf),
    (TWO**5000, math.inf),
    (-(TWO**5000), -math.inf),
    (7, 7.0),  # plain ints are accepted
]


@pytest.mark.parametrize("value,expected", F64_CASES)
def test_round_exact_float64_hand_cases(value, expected):
    assert same_float(rounded_scalar(value), expected)


F32_CASES = [
    (1 + TWO**-24, 1.0),  # tie: even
    (1 + 3 * TWO**-24, 1 + 2.0**-22),
    (TWO**-150, 0.0),
    (3 * TWO**-150, 2.0**-148),
    (-(TWO**-160), -0.0),
    (TWO**-126 - TWO**-150, 2.0**-126),
    (F32_MAX, float(F32_MAX)),
    (F32_MAX + TWO**103 - TWO**-10, float(F32_MAX)),
    (F32_MAX + TWO**103, math.inf),
    (-(F32_MAX + TWO**103), -math.inf),
]


@pytest.mark.parametrize("value,expected", F32_CASES)
def test_round_exact_float32_hand_cases(value, expected):
    result = round_exact(np.array([[value]], dtype=object), dtype=torch.float32)
    assert result.dtype == torch.float32
    assert same_float(result[0, 0].item(), expected)


DOUBLE_ROUNDING_TRAPS = [
    # Through float64 these first land exactly on a float32 tie (the tiny
    # extra is lost) and then go to even -- the wrong way.
    (1 + TWO**-24 + TWO**-60, 1 + 2.0**-23),
    (-(1 + TWO**-24 + TWO**-60), -(1 + 2.0**-23)),
    (TWO**-150 + TWO**-230, 2.0**-149),  # subnormal grid
    (F32_MAX + TWO**103 - TWO**-10, float(F32_MAX)),  # overflow boundary
]


@pytest.mark.parametrize("value,expected", DOUBLE_ROUNDING_TRAPS)
def test_round_exact_float32_does_not_double_round(value, expected):
    via_float64 = torch.tensor(float(value), dtype=torch.float64).to(torch.float32).item()
    assert via_float64 != expected  # the trap is real
    assert rounded_scalar(value, torch.float32) == expected


def random_fraction(rng: np.random.Generator) -> Fraction:
    numerator = int(rng.integers(1, 2**62)) << int(rng.integers(0, 120))
    denominator = int(rng.integers(1, 2**62)) << int(rng.integers(0, 1150))
    sign = -1 if rng.random() < 0.5 else 1
    return sign * Fraction(numerator, denominator)


def test_round_exact_float64_matches_python_division_on_random_values():
    # int / int true division in Python is correctly rounded (subnormals too).
    rng = np.random.default_rng(11)
    values = [random_fraction(rng) for _ in range(3000)]
    # exact float64 ties and near-ties around random doubles
    for _ in range(1000):
        x = float(rng.normal()) * 2.0 ** int(rng.integers(-1070, 1000))
        half_ulp = Fraction(math.ulp(x)) / 2
        tie = Fraction(x) + half_ulp * int(rng.integers(-1, 2))  # x, or a tie next to it
        values.append(tie + half_ulp * Fraction(int(rng.integers(-3, 4)), 2**70))
    values = [v for v in values if abs(v) < F64_MAX]
    E = np.array(values, dtype=object).reshape(1, -1)
    result = round_exact(E).tolist()[0]
    expected = [v.numerator / v.denominator for v in values]
    assert result == expected


def reference_round_float32(value: Fraction) -> float:
    """Independent RN-even to float32: nearest of three float32 candidates."""
    guess = np.float32(float(value))  # right or one step off
    candidates = [guess, np.nextafter(guess, np.float32(np.inf)), np.nextafter(guess, np.float32(-np.inf))]

    def key(candidate):
        odd = int(np.array(candidate, dtype=np.float32).view(np.int32)) & 1
        return abs(Fraction(float(candidate)) - value), odd

    return float(min(candidates, key=key))


def test_round_exact_float32_matches_independent_reference():
    rng = np.random.default_rng(5)
    values = []
    for _ in range(3000):
        # A random finite float32 (normal or subnormal) and its upper neighbour.
        bits = int(rng.integers(1, 0x7E800000))  # below 2**126: no overflow below
        if rng.random() < 0.2:
            bits = int(rng.integers(1, 0x00800000 * 3))  # subnormals and the lowest binades
        x = np.array(bits, dtype=np.int32).view(np.float32)
        gap = Fraction(float(np.nextafter(x, np.float32(np.inf)))) - Fraction(float(x))
        base = Fraction(float(x))
        kind = rng.integers(0, 4)
        if kind == 0:  # exact midpoint
            value = base + gap / 2
        elif kind == 1:  # midpoint plus or minus a tiny amount (double-rounding traps)
            value = base + gap / 2 + (1 if rng.random() < 0.5 else -1) * gap / 2 ** int(rng.integers(30, 200))
        elif kind == 2:  # anywhere in the gap
            value = base + gap * Fraction(int(rng.integers(0, 2**40)), 2**40)
        else:  # generic rational within a factor 2 of x
            value = Fraction(int(rng.integers(1, 2**62)), int(rng.integers(2**61, 2**62))) * base
        values.append(-value if rng.random() < 0.5 else value)
    E = np.array(values, dtype=object).reshape(50, -1)
    result = round_exact(E, dtype=torch.float32)
    assert result.dtype == torch.float32
    expected = torch.tensor([reference_round_float32(v) for v in values], dtype=torch.float32).reshape(50, -1)
    assert torch.equal(result, expected)


def test_round_exact_rejects_bad_inputs():
    good = np.array([[Fraction(1)]], dtype=object)
    with pytest.raises(ValueError, match=r"round_exact: dtype must be torch.float64 or torch.float32, got torch.float16"):
        round_exact(good, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"round_exact: dtype must be .* got torch.int32"):
        round_exact(good, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"round_exact: E must be a 2-D array of Fractions, got shape \(1,\)"):
        round_exact(np.array([Fraction(1)], dtype=object))
    with pytest.raises(TypeError, match=r"round_exact: E must hold exact rationals .* got an entry of type float"):
        round_exact(np.array([[Fraction(1), 0.5]], dtype=object))


# ---------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def product_case():
    g = seeded(21)
    A, B = phi_matrix(6, 16, 1.0, g), phi_matrix(16, 5, 1.0, g)
    return A, B, exact_matmul(A, B)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_correctly_rounded_result_scores_perfectly(product_case, dtype):
    A, B, E = product_case
    C = round_exact(E, dtype=dtype)
    assert correctly_rounded_share(C, E) == 1.0
    assert (ulps_from_nearest(C, E) == 0).all()
    unit_roundoff = 2.0**-53 if dtype == torch.float64 else 2.0**-24
    assert (relative_errors(C, E) <= unit_roundoff).all()
    assert componentwise_error(C, E, A, B) <= unit_roundoff


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_one_ulp_nudge_is_counted(product_case, dtype):
    A, B, E = product_case
    C = round_exact(E, dtype=dtype)
    C[2, 3] = torch.nextafter(C[2, 3], torch.tensor(math.inf, dtype=dtype))
    ulps = ulps_from_nearest(C, E)
    assert ulps[2, 3] == 1
    assert ulps.sum() == 1
    assert correctly_rounded_share(C, E) == (E.size - 1) / E.size
    down = torch.tensor(-math.inf, dtype=dtype)
    C[0, 0] = torch.nextafter(torch.nextafter(C[0, 0], down), down)
    assert ulps_from_nearest(C, E)[0, 0] == 2
    assert correctly_rounded_share(C, E) == (E.size - 2) / E.size


def metric_inputs(exact_values, computed_values, dtype=torch.float64):
    E = np.array(exact_values, dtype=object)
    C = torch.tensor(computed_values, dtype=dtype)
    return C, E


def test_ulps_across_zero_binades_and_infinity():
    tiny = 2.0**-1074
    exact = [[Fraction(0), Fraction(0), Fraction(tiny), Fraction(1), Fraction(1), F64_MAX, Fraction(5)]]
    computed = [[tiny, -tiny, -tiny, 1 - 2.0**-53, 1 + 2.0**-52, math.inf, math.nan]]
    C, E = metric_inputs(exact, computed)
    ulps = ulps_from_nearest(C, E)
    assert ulps.dtype == np.float64
    assert ulps[0, :6].tolist() == [1, 1, 2, 1, 1, 1]
    assert math.isnan(ulps[0, 6])
    # +0 vs -0 is no distance at all
    C, E = metric_inputs([[Fraction(0), -(TWO**-1080)]], [[-0.0, 0.0]])
    assert ulps_from_nearest(C, E).tolist() == [[0, 0]]
    assert correctly_rounded_share(C, E) == 1.0
    # -inf against +inf must not overflow an int64
    C, E = metric_inputs([[TWO**2000]], [[-math.inf]])
    assert ulps_from_nearest(C, E)[0, 0] == 2 * float(0x7FF0000000000000)


def test_ulps_and_share_for_float32_use_the_float32_grid():
    exact = [[1 + TWO**-24 + TWO**-60, Fraction(1, 3)]]
    nearest = [[1 + 2.0**-23, float(np.float32(1 / 3))]]
    C, E = metric_inputs(exact, nearest, dtype=torch.float32)
    assert ulps_from_nearest(C, E).tolist() == [[0, 0]]
    C, E = metric_inputs(exact, [[1.0, float(np.float32(1 / 3))]], dtype=torch.float32)
    assert ulps_from_nearest(C, E).tolist() == [[1, 0]]  # one float32 step, not 2**29 float64 ones
    assert correctly_rounded_share(C, E) == 0.5


def test_componentwise_error_known_values():
    A = torch.tensor([[1.0, -1.0], [0.0, 0.0], [3.0, 4.0]], dtype=torch.float64)
    B = torch.tensor([[1.0, 2.0], [1.0, 0.5]], dtype=torch.float64)
    E = exact_matmul(A, B)  # [[0, 1.5], [0, 0], [7, 8]]; |A||B| = [[2, 2.5], [0, 0], [7, 8]]
    C = torch.tensor([[2.0**-10, 1.5], [0.0, 0.0], [7.0, 8.0 + 2.0**-49]], dtype=torch.float64)
    errors = componentwise_errors(C, E, A, B)
    assert errors.tolist() == [[2.0**-11, 0.0], [0.0, 0.0], [0.0, 2.0**-52]]
    assert componentwise_error(C, E, A, B) == 2.0**-11
    # zero normaliser: anything but an exact zero is an infinite error
    C[1, 0] = 2.0**-1074
    assert componentwise_errors(C, E, A, B)[1, 0] == math.inf
    assert componentwise_error(C, E, A, B) == math.inf
    # float32 C is read at its own values
    C32 = torch.tensor([[0.0, 1.5 + 2.0**-20], [0.0, 0.0], [7.0, 8.0]], dtype=torch.float32)
    assert componentwise_errors(C32, E, A, B).tolist() == [[0.0, 2.0**-20 / 2.5], [0.0, 0.0], [0.0, 0.0]]


def test_componentwise_error_survives_normaliser_underflow_and_overflow():
    # |A||B| underflows to 0 in float64 although the exact value is 1e-400-ish.
    A = torch.tensor([[1e-200, 1e-210]], dtype=torch.float64)
    B = torch.tensor([[1e-200], [-1e-210]], dtype=torch.float64)
    assert abs_product(A, B)[0, 0].item() == 0.0
    E = exact_matmul(A, B)
    C = round_exact(E)  # rounds to 0: the whole exact value is the error
    expected = float(E[0, 0] / (Fraction(1e-200) ** 2 + Fraction(1e-210) ** 2))
    assert componentwise_error(C, E, A, B) == expected
    # |A||B| overflows to inf while the exact product is tiny.
    A = torch.tensor([[1e200, 1e200]], dtype=torch.float64)
    B = torch.tensor([[1e200], [-1e200]], dtype=torch.float64)
    E = exact_matmul(A, B)
    C = torch.tensor([[2.0**600]], dtype=torch.float64)
    assert componentwise_error(C, E, A, B) == float(Fraction(2.0**600) / (2 * Fraction(1e200) ** 2))


def test_relative_errors_known_values():
    exact = [[Fraction(4), Fraction(0), Fraction(0), Fraction(-3), Fraction(1, 3), Fraction(2)]]
    computed = [[5.0, 0.0, 1e-300, -3.0, 1 / 3, math.inf]]
    C, E = metric_inputs(exact, computed)
    errors = relative_errors(C, E)
    assert errors[0, :5].tolist() == [0.25, 0.0, math.inf, 0.0, float(abs(Fraction(1 / 3) - Fraction(1, 3)) * 3)]
    assert errors[0, 5] == math.inf
    C[0, 0] = math.nan
    assert math.isnan(relative_errors(C, E)[0, 0])


def test_metrics_take_numpy_integers_as_exact_values():
    """Exact values given as NumPy integers (which the check accepts as rationals) give the same
    metrics as Python's (relative_errors raised on them)."""
    C = torch.tensor([[2.5, -7.0]], dtype=torch.float64)
    A = torch.tensor([[1.0]], dtype=torch.float64)
    B = torch.tensor([[2.0, 4.0]], dtype=torch.float64)
    python = [[2, -8]]
    numpy_ints = [[np.int64(2), np.int32(-8)]]
    assert relative_errors(C, numpy_ints).tolist() == relative_errors(C, python).tolist() \
        == [[0.25, 0.125]]
    assert componentwise_errors(C, numpy_ints, A, B).tolist() == \
        componentwise_errors(C, python, A, B).tolist()


def test_metrics_follow_the_rows_cols_convention(product_case):
    A, B, E_full = product_case
    rows, cols = [1, 4], [0, 2, 4]
    E_sub = exact_matmul(A, B, rows=rows, cols=cols)
    C = A @ B  # full shape
    C[4, 2] = C[4, 2] * 2  # a big error inside the sample
    C[0, 1] = math.nan  # outside the sample: must be ignored
    sub = np.ix_(rows, cols)
    full_errors = componentwise_errors(C, E_full, A, B)
    assert np.array_equal(componentwise_errors(C, E_sub, A, B, rows, cols), full_errors[sub])
    assert componentwise_error(C, E_sub, A, B, rows, cols) == full_errors[sub].max()
    assert np.array_equal(ulps_from_nearest(C, E_sub, rows, cols), ulps_from_nearest(C, E_full)[sub])
    assert np.array_equal(relative_errors(C, E_sub, rows, cols), relative_errors(C, E_full)[sub])
    share = correctly_rounded_share(C, E_sub, rows, cols)
    C_sample = C[torch.tensor(rows)][:, torch.tensor(cols)]
    assert share == float((C_sample == round_exact(E_sub)).double().mean())
    assert share < 1.0


def test_abs_product():
    A = torch.tensor([[1.0, -2.0]], dtype=torch.float32)
    B = torch.tensor([[-3.0], [4.0]], dtype=torch.float64)
    result = abs_product(A, B)
    assert result.dtype == torch.float64
    assert result.tolist() == [[11.0]]


def test_metrics_reject_bad_inputs(product_case):
    A, B, E = product_case
    C = A @ B
    with pytest.raises(ValueError, match=r"ulps_from_nearest: E must have the shape of C \(6, 5\) when rows/cols are not given, got \(2, 2\)"):
        ulps_from_nearest(C, E[:2, :2])
    with pytest.raises(ValueError, match=r"relative_errors: E must have shape \(len\(rows\), len\(cols\)\) = \(2, 5\), got \(6, 5\)"):
        relative_errors(C, E, rows=[0, 1])
    with pytest.raises(TypeError, match=r"correctly_rounded_share: C must be torch.float64 or torch.float32, got torch.int32"):
        correctly_rounded_share(C.int(), E)
    with pytest.raises(ValueError, match=r"correctly_rounded_share: no entries to compare"):
        correctly_rounded_share(C, E[:0, :], rows=[])
    with pytest.raises(ValueError, match=r"componentwise_errors: C must have shape \(A rows, B cols\) = \(6, 4\)"):
        componentwise_errors(C, E, A, B[:, :4])
    with pytest.raises(ValueError, match=r"componentwise_errors: inner sizes of A"):
        componentwise_errors(C, E, A, B[:3])
    with pytest.raises(ValueError, match=r"componentwise_errors: rows contains index 6"):
        componentwise_errors(C, E[:1], A, B, rows=[6])
    with pytest.raises(TypeError, match=r"relative_errors: E must hold exact rationals"):
        relative_errors(C, E.astype(float).astype(object))
    with pytest.raises(TypeError, match=r"abs_product: A must be a torch.Tensor, got ndarray"):
        abs_product(A.numpy(), B)


# ---------------------------------------------------------------------------
# Generators
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_generators_shapes_dtypes_devices_and_reproducibility(dtype):
    made = {
        "phi": lambda g: phi_matrix(7, 3, 1.0, g, dtype=dtype, device="cpu"),
        "exprange": lambda g: exponent_range_matrix(7, 3, -5, 5, g, dtype=dtype, device=torch.device("cpu")),
    }
    for name, make in made.items():
        first, again, other = make(seeded(1)), make(seeded(1)), make(seeded(2))
        assert first.shape == (7, 3), name
        assert first.dtype == dtype, name
        assert first.device.type == "cpu", name
        assert bool((first != 0).any()), name
        assert bool(torch.isfinite(first).all()), name
        assert torch.equal(first, again), name
        assert not torch.equal(first, other), name
    A, B = gendot_matrices(3, 8, 2, 1e6, seeded(1), dtype=dtype)
    assert (A.shape, B.shape, A.dtype, B.dtype) == ((3, 8), (8, 2), dtype, dtype)
    assert bool((A != 0).any()) and bool((B != 0).any())
    assert torch.equal(A, gendot_matrices(3, 8, 2, 1e6, seeded(1), dtype=dtype)[0])
    assert isinstance(phi_matrix(1, 1, 0.0), torch.Tensor)  # generator=None works


def test_portable_exp_is_within_two_ulps_of_mpmath():
    from ozaki.accuracy import _portable_exp
    g = torch.Generator().manual_seed(5)
    x = torch.cat([torch.rand(2000, generator=g, dtype=torch.float64) * 1400 - 700,
                   torch.randn(2000, generator=g, dtype=torch.float64) * 3,
                   torch.tensor([0.0, -0.0, 1e-300, 709.78, -708.3], dtype=torch.float64)])
    values = _portable_exp(x)
    worst = 0.0
    for point, value in zip(x.tolist(), values.tolist()):
        exact = mpmath.exp(mpmath.mpf(point))
        ulp = math.ulp(float(exact))
        worst = max(worst, float(abs(mpmath.mpf(value) - exact)) / ulp)
    assert worst <= 2.0, worst


def test_generated_inputs_are_the_same_on_every_machine():
    # The generators use basic IEEE operations only (no vectorised exp/pow, whose last bit differs
    # between CPUs): a seed gives these exact bits wherever the tests run, GPU hosts included.
    g = torch.Generator().manual_seed(2026)
    A = phi_matrix(16, 64, 2.0, g)
    E = exponent_range_matrix(8, 8, -300, 300, generator=g)
    digest = hashlib.sha256(A.numpy().tobytes() + E.numpy().tobytes()).hexdigest()
    assert digest == "dc53bb9c707e751ddd1726b8bd2179a49fbefd85023d1b6d5ab86f7af815cda2"


def test_phi_controls_the_exponent_spread():
    g = seeded(4)
    narrow = phi_matrix(64, 64, 0.0, g)
    wide = phi_matrix(64, 64, 4.0, g)
    assert narrow.abs().max() <= 0.5
    spread_narrow = torch.log2(narrow.abs()[narrow != 0]).std().item()
    spread_wide = torch.log2(wide.abs()[wide != 0]).std().item()
    # log2|U - 1/2| has std ~1.44; adding 4*randn/ln 2 brings it to ~6.
    assert spread_narrow < 2.0
    assert spread_wide > 5.0
    assert wide.abs().max() > 1e4


def test_exponent_range_spans_the_requested_decades():
    x = exponent_range_matrix(64, 64, -300, 300, seeded(8))
    magnitudes = x.abs().numpy()
    assert (magnitudes >= 1e-300).all() and (magnitudes < 1e301).all()
    decades = np.floor(np.log10(magnitudes))
    assert decades.min() <= -290 and decades.max() >= 290
    assert (x > 0).any() and (x < 0).any()
    one_decade = exponent_range_matrix(32, 32, -5, -5, seeded(8)).abs()
    assert bool((one_decade >= 1e-5).all()) and bool((one_decade < 1e-4).all())
    # the extreme limits are accepted and stay finite and nonzero
    for dtype, low, high in ((torch.float64, -323, 307), (torch.float32, -44, 37)):
        extreme = exponent_range_matrix(32, 32, low, high, seeded(9), dtype=dtype)
        assert bool(torch.isfinite(extreme).all()) and bool((extreme != 0).all())


@pytest.mark.parametrize("condition", [1e10, 1e20, 1e30])
@pytest.mark.parametrize("k,dtype", [(32, torch.float64), (64, torch.float64), (64, torch.float32)])
def test_gendot_diagonal_reaches_the_requested_condition(condition, k, dtype):
    A, B = gendot_matrices(4, k, 4, condition, seeded(12), dtype=dtype)
    diagonal = [dot_condition(A[i], B[:, i]) for i in range(4)]
    for achieved in diagonal:
        assert condition / 1e3 <= achieved <= condition * 1e3, diagonal
    off_diagonal = [dot_condition(A[i], B[:, j]) for i in range(4) for j in range(4) if i != j]
    assert np.median(off_diagonal) < condition / 1e3


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("k", [3, 4, 5, 8, 9])
def test_gendot_reaches_the_largest_condition_it_accepts(k, dtype):
    """The largest condition gendot_matrices accepts for k terms (the most its construction can
    reach, or the format's limit) is reached within a factor of 1e3 on the diagonal."""
    from ozaki.accuracy import _gendot_reachable_bits
    reachable = _gendot_reachable_bits(k, dtype)
    bits = min(reachable, 119 if dtype == torch.float32 else 1015)
    A, B = gendot_matrices(3, k, 3, 2.0 ** bits, seeded(13), dtype=dtype)
    for i in range(3):
        assert 2.0 ** bits / 1e3 <= dot_condition(A[i], B[:, i]) <= 2.0 ** bits * 1e3
    if bits == reachable:
        with pytest.raises(ValueError, match="out of reach"):
            gendot_matrices(1, k, 1, 2.0 ** (bits + 1), seeded(13), dtype=dtype)


def test_gendot_rectangular_shapes_use_the_short_diagonal():
    A, B = gendot_matrices(5, 40, 2, 1e15, seeded(2))
    assert A.shape == (5, 40) and B.shape == (40, 2)
    for i in range(2):
        assert 1e12 <= dot_condition(A[i], B[:, i]) <= 1e18


def test_dot_condition_is_exact():
    x = torch.tensor([1e300, 1.0, -1e300], dtype=torch.float64)
    y = torch.ones(3, dtype=torch.float64)
    # float64 would see a zero dot product here
    assert dot_condition(x, y) == float(2 * (2 * Fraction(1e300) + 1))
    x = torch.tensor([1.0, 1.0], dtype=torch.float32)
    y = torch.tensor([1.0, -1.0 + 2.0**-40], dtype=torch.float64)
    assert dot_condition(x, y) == 2.0**42 - 2
    assert dot_condition(torch.tensor([1.0, 1.0]), torch.tensor([1.0, -1.0])) == math.inf


def test_sample_entries_properties():
    rows, cols = sample_entries(100, 7, 10, seeded(3))
    assert len(rows) == 10 and len(cols) == 7
    for indices, size in ((rows, 100), (cols, 7)):
        assert indices == sorted(set(indices))
        assert all(isinstance(i, int) and 0 <= i < size for i in indices)
    assert (rows, cols) == sample_entries(100, 7, 10, seeded(3))
    assert rows != sample_entries(100, 7, 10, seeded(4))[0]
    assert rows != list(range(10))  # actually random, not a prefix
    assert sample_entries(5, 5, 1)[0][0] in range(5)


def test_generators_reject_bad_inputs():
    with pytest.raises(ValueError, match=r"phi_matrix: rows must be >= 1, got 0"):
        phi_matrix(0, 3, 1.0)
    with pytest.raises(TypeError, match=r"phi_matrix: cols must be an integer, got float 2.5"):
        phi_matrix(3, 2.5, 1.0)
    with pytest.raises(ValueError, match=r"phi_matrix: phi must be a finite real number >= 0, got -1"):
        phi_matrix(3, 3, -1)
    with pytest.raises(ValueError, match=r"phi_matrix: phi must be a finite real number >= 0, got nan"):
        phi_matrix(3, 3, math.nan)
    with pytest.raises(ValueError, match=r"phi_matrix: phi=100 produced values outside the range of torch.float32"):
        phi_matrix(64, 64, 100, seeded(0), dtype=torch.float32)
    with pytest.raises(ValueError, match=r"phi_matrix: dtype must be .* got torch.float16"):
        phi_matrix(3, 3, 1.0, dtype=torch.float16)
    with pytest.raises(TypeError, match=r"phi_matrix: generator must be a torch.Generator or None, got int"):
        phi_matrix(3, 3, 1.0, generator=5)
    with pytest.raises(ValueError, match=r"exponent_range_matrix: low must be <= high, got low=3, high=2"):
        exponent_range_matrix(2, 2, 3, 2)
    with pytest.raises(ValueError, match=r"exponent_range_matrix: high=308 is too large for torch.float64"):
        exponent_range_matrix(2, 2, 0, 308)
    with pytest.raises(ValueError, match=r"exponent_range_matrix: high=38 is too large for torch.float32"):
        exponent_range_matrix(2, 2, 0, 38, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"exponent_range_matrix: low=-324 is too small for torch.float64"):
        exponent_range_matrix(2, 2, -324, 0)
    with pytest.raises(ValueError, match=r"exponent_range_matrix: low=-45 is too small for torch.float32"):
        exponent_range_matrix(2, 2, -45, 0, dtype=torch.float32)
    with pytest.raises(TypeError, match=r"exponent_range_matrix: low must be an integer, got float"):
        exponent_range_matrix(2, 2, -1.5, 0)
    with pytest.raises(ValueError, match=r"gendot_matrices: k must be >= 2, got 1"):
        gendot_matrices(2, 1, 2, 1e10)
    with pytest.raises(ValueError, match=r"gendot_matrices: condition must be a finite real number > 1, got 0.5"):
        gendot_matrices(2, 8, 2, 0.5)
    with pytest.raises(ValueError, match=r"gendot_matrices: condition must be a finite real number > 1, got inf"):
        gendot_matrices(2, 8, 2, math.inf)
    with pytest.raises(ValueError, match=r"gendot_matrices: condition=1e\+80 is too large for torch.float32"):
        gendot_matrices(2, 8, 2, 1e80, dtype=torch.float32)
    # conditions the construction cannot reach with k terms (k = 2 stays near 2; k = 3 overflowed)
    with pytest.raises(ValueError, match=r"gendot_matrices: condition=100000000.0 is out of reach of "
                                         r"k = 2 terms in torch.float64, .*about 2\^2 at most.*k >= 3"):
        gendot_matrices(1, 2, 1, 1e8)
    with pytest.raises(ValueError, match=r"out of reach of k = 3 terms in torch.float32, .*2\^28 at "
                                         r"most .*k >= 9 reaches it"):
        gendot_matrices(1, 3, 300, 2.0 ** 119, seeded(0), dtype=torch.float32)
    with pytest.raises(ValueError, match=r"out of reach of k = 10 terms in torch.float64, .*2\^269"):
        gendot_matrices(1, 10, 1, 1e250)
    with pytest.raises(ValueError, match=r"dot_condition: x and y must have the same length, got 2 and 3"):
        dot_condition(torch.ones(2), torch.ones(3))
    with pytest.raises(ValueError, match=r"dot_condition: x must be 1-D, got 2-D with shape \(2, 1\)"):
        dot_condition(torch.ones(2, 1), torch.ones(2))
    with pytest.raises(TypeError, match=r"dot_condition: y must be a torch.Tensor, got list"):
        dot_condition(torch.ones(2), [1.0, 1.0])
    with pytest.raises(ValueError, match=r"dot_condition: y must contain only finite values"):
        dot_condition(torch.ones(2), torch.tensor([1.0, math.inf]))
    with pytest.raises(ValueError, match=r"sample_entries: count must be >= 1, got 0"):
        sample_entries(5, 5, 0)
    with pytest.raises(ValueError, match=r"sample_entries: m must be >= 1, got 0"):
        sample_entries(0, 5, 1)
    with pytest.raises(TypeError, match=r"sample_entries: n must be an integer, got bool"):
        sample_entries(5, True, 1)


def test_negative_magnitudes_are_refused():
    """magnitudes must be |A||B|: the signed product passed in its place (whose negative entries
    would give negative, meaningless errors) is named."""
    A = torch.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=torch.float64)
    B = torch.tensor([[0.25, 1.0], [0.75, -1.0]], dtype=torch.float64)
    E = exact_matmul(A, B)
    with pytest.raises(ValueError, match=r"componentwise_errors: magnitudes must be the exact "
                                         r"\|A\|\|B\| \(no negative entry\), got -5/4"):
        componentwise_errors(A @ B, E, A, B, magnitudes=E)


@pytest.mark.parametrize("generate", [lambda **kw: phi_matrix(2, 2, 1.0, **kw),
                                      lambda **kw: exponent_range_matrix(2, 2, -3, 3, **kw),
                                      lambda **kw: gendot_matrices(2, 4, 2, 1e6, **kw)],
                         ids=["phi_matrix", "exponent_range_matrix", "gendot_matrices"])
def test_generators_check_their_device_before_drawing(generate):
    """A device that is not cpu or a usable CUDA device is named, before the generator draws."""
    g = seeded(5)
    state = g.get_state()
    with pytest.raises(ValueError, match=r"device must be 'cpu', 'cuda' or 'cuda:I', got 'gpu'"):
        generate(generator=g, device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"device is cuda:0 but CUDA is not available here"):
            generate(generator=g, device="cuda:0")
    assert torch.equal(g.get_state(), state)
