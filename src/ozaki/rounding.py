"""Correct rounding of exact rationals onto the IEEE binary formats, in integer arithmetic alone:
the exact references of ozaki.accuracy, and the scalars ozaki.gemm takes in float32."""

import math

import torch

# IEEE binary formats: (significand bits incl. the hidden bit, emin, emax).
FORMATS = {
    torch.float64: (53, -1022, 1023),
    torch.float32: (24, -126, 127),
}


def round_rational(numerator: int, denominator: int, fmt: tuple[int, int, int]) -> float:
    """Round ``numerator / denominator`` to the format ``fmt`` (RN, ties to even).

    ``fmt`` is ``(precision, emin, emax)``.  Returns a Python float holding the
    rounded value exactly (for float32 it is a float32 value stored in a float).
    Only integer arithmetic decides the rounding, so there is no double rounding.
    """
    precision, emin, emax = fmt
    if denominator <= 0:
        raise ValueError(f"round_rational: denominator must be positive, got {denominator}")
    if numerator == 0:
        return 0.0
    negative = numerator < 0
    magnitude = -numerator if negative else numerator

    # exponent = floor(log2(magnitude / denominator)), found from bit lengths and
    # corrected by one exact comparison.
    exponent = magnitude.bit_length() - denominator.bit_length()
    if exponent >= 0:
        if magnitude < denominator << exponent:
            exponent -= 1
    elif magnitude << -exponent < denominator:
        exponent -= 1

    # Spacing of representable numbers around the value: 2**quantum.  Below the
    # normal range the spacing stays at the subnormal one (gradual underflow).
    quantum = max(exponent, emin) - (precision - 1)
    if quantum >= 0:
        units, remainder = divmod(magnitude, denominator << quantum)
        half_compare = 2 * remainder - (denominator << quantum)
    else:
        units, remainder = divmod(magnitude << -quantum, denominator)
        half_compare = 2 * remainder - denominator
    if half_compare > 0 or (half_compare == 0 and units & 1):
        units += 1  # may carry into the next binade: still exact below

    # Rounding with unbounded exponent then testing >= 2**(emax+1) is exactly
    # IEEE's rule "|x| >= max + half an ulp overflows" (the tie there goes up,
    # because the largest finite significand is odd).
    overflow_shift = emax + 1 - quantum  # 2**(emax+1) == 2**overflow_shift units
    if overflow_shift <= 0 or units >= 1 << overflow_shift:
        return -math.inf if negative else math.inf
    value = math.ldexp(float(units), quantum)  # units <= 2**precision: exact
    return -value if negative else value
