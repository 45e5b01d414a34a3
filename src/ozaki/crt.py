"""Moduli and scaling of Ozaki scheme II (backend="crt"; docs/algorithm.md, "Scheme II").

Mirrors the constants of csrc/crt.h. Rows of A and columns of B are scaled to integers whose
2-norms stay below 2^t_a and 2^t_b; the moduli's product P must exceed 2 |A'B'|, so t_a + t_b is
the budget the moduli buy, and every extra modulus buys about 8 bits of it. Each row's scale is a
number with a 5-bit significand, c = (16 + f) 2^(e - 4), held as the int32 code 16 e + f
(csrc/crt.h, row_scale).
"""

import bisect
import functools
import math
from fractions import Fraction

import torch

#: Pairwise coprime moduli, largest first (csrc/crt.h, kModuli).
MODULI = (256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, 197, 193)
MAX_MODULI = len(MODULI)
#: Largest inner dimension with exact INT32 accumulation of INT8 residue products (k 2^14 < 2^31).
MAX_INNER = (1 << 17) - 1
#: Largest scale: rounded operands are int64 (csrc/crt.h, kCrtMaxScaleBits).
MAX_SCALE_BITS = 62
#: The reconstruction reads q = rint(S / P) from a float sum: |A'B'| stays 2^-30 P below P / 2.
RECONSTRUCTION_MARGIN_BITS = 30
#: Fraction bits of a row scale's significand (csrc/crt.h, kScaleFractionBits).
SCALE_FRACTION_BITS = 4
#: Stored INT8 residue rows are padded with zeros to a multiple of this (csrc/crt.h,
#: kResidueRowAlign).
RESIDUE_ROW_ALIGN = 16


def left_residue_shape(shape, moduli: int):
    """The shape of ozaki::crt_left_residues' result for an operand of `shape`, (m, k) or
    (batch, m, k): (moduli, m, k16) or (batch, moduli, m, k16), k16 = k rounded up to 16."""
    *batch, m, k = shape
    return (*batch, moduli, m, -(-k // RESIDUE_ROW_ALIGN) * RESIDUE_ROW_ALIGN)
#: Bits of an entry of a row's RMS size in the plan's magnitude digits (csrc/crt.h,
#: kCrtMagnitudeHeadroomBits).
MAGNITUDE_HEADROOM_BITS = 5


def magnitude_gain(k: int) -> int:
    """The gain g of the plan's magnitude digits min(127, floor(|a| c 2^g)) for inner dimension k
    (csrc/crt.h, crt_magnitude_gain): MAGNITUDE_HEADROOM_BITS + ceil(log2(k) / 2)."""
    ceil_log2 = (k - 1).bit_length() if k > 1 else 0
    return MAGNITUDE_HEADROOM_BITS + (ceil_log2 + 1) // 2


#: Moduli of exact scheme II (csrc/crt_exact.h, kExactModuli): MODULI, then the primes from 191
#: down to 71.
EXACT_MODULI = MODULI + (191, 181, 179, 173, 167, 163, 157, 151, 149, 139, 137, 131, 127, 113,
                         109, 107, 103, 101, 97, 89, 83, 79, 73, 71)
MAX_EXACT_MODULI = len(EXACT_MODULI)


def recoverable(product: int) -> Fraction:
    """The largest |X| the reconstruction recovers from residues modulo moduli whose product is
    `product`: P / 2 - P 2^-30 (its margin, csrc/crt.h)."""
    return Fraction(product, 2) - Fraction(product, 1 << RECONSTRUCTION_MARGIN_BITS)


def _exact_limits():
    """P / 2 - P 2^-30 for the products P of the first 1, 2, ... EXACT_MODULI (increasing)."""
    limits, product = [], 1
    for p in EXACT_MODULI:
        product *= p
        limits.append(recoverable(product))
    return tuple(limits)


_EXACT_LIMITS = _exact_limits()


def exact_limit(count: int) -> Fraction:
    """The largest |X| that the first `count` exact-scheme-II moduli recover (1 <= count <= 40)."""
    return _EXACT_LIMITS[count - 1]


#: The factor of exact scheme II's norm bound over the product of the rows' two largest integer
#: norms, each a float64 within a rounding of its exact value (product.py, exact_norm_bound).
NORM_BOUND_MARGIN = (1 + Fraction(1, 1 << 50)) ** 2
#: A float64 product x of two floats is within a factor 1 + 2^-53 of the exact product.
_FLOAT_PRODUCT_ERROR = 1 + Fraction(1, 1 << 53)


def _float_up(x: Fraction) -> float:
    f = float(x)
    return f if f >= x else math.nextafter(f, math.inf)


def _float_down(x: Fraction) -> float:
    f = float(x)
    return f if f <= x else math.nextafter(f, -math.inf)


#: Per count c: a float product of the norms above it means a norm bound above exact_limit(c).
_NORM_PRODUCTS_ABOVE = tuple(_float_up(limit * _FLOAT_PRODUCT_ERROR) for limit in _EXACT_LIMITS)
#: A float product of the norms up to this means a norm bound within MAX_EXACT_MODULI's limit.
_NORM_PRODUCTS_WITHIN = _float_down(_EXACT_LIMITS[-1] / _FLOAT_PRODUCT_ERROR / NORM_BOUND_MARGIN)


#: Per count c: a float above it is above exact_limit(c).
_LIMITS_ABOVE = tuple(_float_up(limit) for limit in _EXACT_LIMITS)


def above_exact_limit(x: float, count: int) -> bool:
    """Whether the float x exceeds exact_limit(count) (1 <= count <= 40), by a float comparison
    that is never wrong and misses only an x within a rounding above the limit."""
    return x > _LIMITS_ABOVE[count - 1]


def norm_bound_beyond_every_count(bound_a: float, bound_b: float) -> bool:
    """Whether exact scheme II's norm bound, bound_a bound_b NORM_BOUND_MARGIN, surely exceeds what
    MAX_EXACT_MODULI moduli recover (exact_moduli of it is None), read from the float product
    bound_a * bound_b alone; False where that product cannot tell."""
    return bound_a * bound_b > _NORM_PRODUCTS_ABOVE[-1]


def norm_bound_needs_more(bound_a: float, bound_b: float, count: int) -> bool:
    """Whether exact scheme II's norm bound, bound_a bound_b NORM_BOUND_MARGIN, surely needs more
    than `count` moduli (1 <= count) and at most MAX_EXACT_MODULI, read from the float product
    bound_a * bound_b alone (no Fractions); False where that product cannot tell."""
    product = bound_a * bound_b
    return _NORM_PRODUCTS_ABOVE[count - 1] < product <= _NORM_PRODUCTS_WITHIN


def exact_moduli(bound: Fraction):
    """Fewest exact-scheme-II moduli whose product P recovers every integer of magnitude up to
    `bound` (P / 2 - P 2^-30 >= bound, the reconstruction's margin); None when 40 cannot."""
    count = bisect.bisect_left(_EXACT_LIMITS, bound) + 1
    return count if count <= MAX_EXACT_MODULI else None


def wide_scale_bits(moduli: int, k: int):
    """Wide scheme II (power-of-two row scales, exact scheme II's moduli): the largest (t_a, t_b),
    t_a <= t_b <= t_a + 1, with (2^t_a + g)(2^t_b + g) <= P/2 - P 2^-30 for the product P of the
    first `moduli` EXACT_MODULI (g = rounding_growth(k)); None when even t = 0 fails."""
    return _wide_scale_bits(moduli, rounding_growth(k))


@functools.lru_cache(maxsize=None)
def _wide_scale_bits(moduli: int, g: int):
    product = math.prod(EXACT_MODULI[:moduli])
    limit = recoverable(product)
    best = None
    for total in range(0, 2 * product.bit_length() + 1):
        t_a = total // 2
        t_b = total - t_a
        if ((1 << t_a) + g) * ((1 << t_b) + g) > limit:
            break
        best = (t_a, t_b)
    return best


def wide_predicted_error(moduli: int, k: int) -> Fraction:
    """Predicted truncation of wide scheme II relative to 1 / (c_a_i c_b_j) (c: the norm scales):
    a row scaled by 2^E_i, E_i = t_a + floor(log2 c_a_i), rounds each entry by at most 1/2 while
    2^-E_i < 2^(1 - t_a) c_a_i, so 2^-t_a + 2^-t_b (one bit above scheme II's 5-bit scales)."""
    return _wide_predicted_error(moduli, rounding_growth(k))


@functools.lru_cache(maxsize=None)
def _wide_predicted_error(moduli: int, g: int) -> Fraction:
    t_a, t_b = _wide_scale_bits(moduli, g)
    return Fraction(1, 1 << t_a) + Fraction(1, 1 << t_b)


def times_power_of_two(codes, t: int):
    """The codes of the scales c 2^t for scale codes `codes` (an int tensor): 16 t added, int32."""
    return (codes + (t << SCALE_FRACTION_BITS)).int()


def scale_parts(codes):
    """(significand, exponent) of scale codes (an int tensor) as int64 tensors: c = significand
    2^exponent with the significand 16 + f in [16, 32) (csrc/crt.h, row_scale)."""
    fraction = 1 << SCALE_FRACTION_BITS
    codes = codes.long()
    significand = fraction + torch.remainder(codes, fraction)
    return significand, torch.div(codes, fraction, rounding_mode="floor") - SCALE_FRACTION_BITS


def power_of_two(exponent):
    """2.0 ** exponent for an integer-valued tensor in the normal range, exactly, from the bit
    pattern (torch.ldexp multiplies by torch.pow(2, e), which is not exact on every device)."""
    return ((exponent.long() + 1023) << 52).view(torch.float64)


def scale_value(code: int):
    """The exact Fraction c = (16 + f) 2^(e - 4) of scale code 16 e + f."""
    fraction = 1 << SCALE_FRACTION_BITS
    return (fraction + code % fraction) * Fraction(2) ** (code // fraction - SCALE_FRACTION_BITS)


def moduli_product(moduli: int) -> int:
    return math.prod(MODULI[:moduli])


@functools.lru_cache(maxsize=256)  # every plan asks for it several times, for a few k
def rounding_growth(k: int) -> int:
    """A power of two >= sqrt(k) / 2: how much rounding each entry to an integer (by at most 1/2)
    can add to a row's 2-norm."""
    half_bits = -(-((k - 1).bit_length() if k > 1 else 0) // 2)
    return 1 << max(half_bits - 1, 0)


def scale_bits(moduli: int, k: int):
    """(t_a, t_b): the largest scales, t_a <= t_b <= t_a + 1 <= 62, with
    (2^t_a + g)(2^t_b + g) <= P/2 - P 2^-30 (g = rounding_growth(k)), so that by Cauchy-Schwarz
    every |A'B'|_ij stays within what the reconstruction recovers. None when even t = 0 fails."""
    return _scale_bits(moduli, rounding_growth(k))


@functools.lru_cache(maxsize=None)  # a few dozen (moduli, g) pairs; every plan asks for them
def _scale_bits(moduli: int, g: int):
    product = moduli_product(moduli)
    limit = recoverable(product)
    best = None
    for total in range(0, 2 * MAX_SCALE_BITS + 1):
        t_a = total // 2
        t_b = total - t_a
        if ((1 << t_a) + g) * ((1 << t_b) + g) <= limit:
            best = (t_a, t_b)
        else:
            break
    return best


def predicted_error(moduli: int, k: int) -> Fraction:
    """Predicted truncation of (A'B')_ij / (c_a_i c_b_j 2^(t_a + t_b)) relative to 1 / (c_a_i c_b_j)
    (c: the norm scales, so that ||a_i||_2 c_a_i <= 1): each operand's rounding is at most
    2^-(t + 1) of its norm bound, so 2^-(t_a + 1) + 2^-(t_b + 1)."""
    return _predicted_error(moduli, rounding_growth(k))


@functools.lru_cache(maxsize=None)
def _predicted_error(moduli: int, g: int) -> Fraction:
    t_a, t_b = _scale_bits(moduli, g)
    return Fraction(1, 1 << (t_a + 1)) + Fraction(1, 1 << (t_b + 1))


def smallest_moduli(k: int) -> int:
    """Fewest moduli whose product leaves any scale at all (t_a, t_b >= 0) for inner dimension k."""
    return _smallest_moduli(rounding_growth(k))


@functools.lru_cache(maxsize=None)
def _smallest_moduli(g: int) -> int:
    return next(n for n in range(1, MAX_MODULI + 1) if _scale_bits(n, g) is not None)


def fewest_moduli(k: int, target, wide: bool = False):
    """The fewest moduli n whose predicted error is at most `target` (a Fraction, or a float:
    compared exactly either way): predicted_error(n, k) over
    n >= smallest_moduli(k) (scheme II), or wide_predicted_error(n, k) over the counts that leave
    a scale (wide scheme II); None when no count up to MAX_MODULI (MAX_EXACT_MODULI) does. The
    same count as trying n = 1, 2, ... in turn, found by bisection over the running minima of the
    errors (the first count at or below the target is the first whose running minimum is)."""
    negated, counts = _error_steps(rounding_growth(k), wide)
    i = bisect.bisect_left(negated, -target)
    return counts[i] if i < len(counts) else None


@functools.lru_cache(maxsize=None)
def _error_steps(g: int, wide: bool):
    """(-e, n) for each count n whose error e is below every smaller count's, in order of n: the
    negated running minima ascend strictly. Each -e is a float where that holds it exactly (then a
    float target is compared in floats, still exactly)."""
    if wide:
        candidates = [(n, _wide_predicted_error(n, g)) for n in range(1, MAX_EXACT_MODULI + 1)
                      if _wide_scale_bits(n, g) is not None]
    else:
        candidates = [(n, _predicted_error(n, g))
                      for n in range(_smallest_moduli(g), MAX_MODULI + 1)]
    negated, counts = [], []
    for n, error in candidates:
        if not counts or -error > negated[-1]:
            negated.append(_exact_float(-error))
            counts.append(n)
    return tuple(negated), tuple(counts)


def _exact_float(x: Fraction):
    """x as a float where that is exact (and normal), else x itself."""
    f = float(x)
    return f if f == x and abs(f) >= MIN_NORMAL else x


#: The smallest normal float64: scaling by powers of two is exact down to it.
MIN_NORMAL = 2.0 ** -1022


def error_level(moduli: int, k: int, magnitude: float, wide: bool = False) -> float:
    """float(e / magnitude), correctly rounded, for e = predicted_error(moduli, k) (scheme II) or
    wide_predicted_error(moduli, k) (wide) and a positive finite magnitude: one float division
    (correctly rounded too) where e is an exact float and the quotient is normal, else in
    Fractions; inf past the float64 range."""
    g = rounding_growth(k)
    error = _wide_predicted_error(moduli, g) if wide else _predicted_error(moduli, g)
    exact = _float_error(moduli, g, wide)
    if exact is not None:
        level = exact / magnitude
        if MIN_NORMAL <= level < math.inf:
            return level
    try:
        return float(error / Fraction(magnitude))
    except OverflowError:  # past the float64 range (a subnormal magnitude)
        return math.inf


@functools.lru_cache(maxsize=None)
def _float_error(moduli: int, g: int, wide: bool):
    """The predicted error as a float where that is exact, else None."""
    error = _wide_predicted_error(moduli, g) if wide else _predicted_error(moduli, g)
    f = _exact_float(error)
    return f if isinstance(f, float) else None
