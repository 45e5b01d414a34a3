"""Slice-count planning: the automatic slice count and the correctly rounded mode (docs/accuracy.md).

Everything here is exact integer or rational arithmetic on values the backends compute bit for
bit alike, so every device picks the same plan for the same inputs (and so returns the same bits).
"""

import dataclasses
import math
from fractions import Fraction

import torch

from . import crt
from .operands import InnerDimensionError
from .slicing import (MAX_SLICES, SIGNIFICAND_BITS, SlicePlan, bits_captured, ceil_log2,
                      digit_bits_for, grid_step_bits, pair_count, slices_for_bits)

#: The automatic plan multiplies exactly (all pairs of the full split) when that costs at most this
#: many times the planned fast mode. Where it applies (short inner dimensions, integer-like data)
#: native products are within a rounding of the exact one, and only the exact product is sure to
#: match them entry by entry.
EXACT_COST_RATIO = 2

#: Bits between the rigorous bound of what a correctly rounded plan leaves out and the unit
#: roundoff of the product's scale: the share of entries that need the exact slow path is about
#: 2^-NEAREST_MARGIN_BITS times the ratio of that scale to |C_ij|.
NEAREST_MARGIN_BITS = 17
#: For rows spanning more bits than its fast plan splits, rounding="nearest" multiplies exactly
#: (all pairs of the full split) when that costs at most this many times the fast plan: the exact
#: split's cost does not depend on the data, while the fast plan's slow path can take a large share
#: of the entries for data spread over many binades.
NEAREST_EXACT_COST_RATIO = 3


def term_bound(slices: int, fast: bool) -> int:
    """c_s: per term of a dot product, the split leaves at most 2^-(s w) of each scaled operand
    and fast mode drops pairs worth at most 2 (s - 1) 2^-(s w) more: together c_s 2^-(s w)
    (csrc/exact.h, dropped_bound, uses the rigorous 2 s + 1 for fast mode too)."""
    return 2 * slices + 1 if fast else 3


def meets_target(slices: int, fast: bool, k: int, beta: int, precision: int,
                 magnitude: Fraction) -> bool:
    """Whether the predicted truncation c_s sqrt(k) 2^-(s w) (k terms of random sign, each below
    the per-term bound) stays within the unit roundoff 2^-precision of magnitude * 2^(tau_a + tau_b),
    magnitude being the smallest (|A||B|)_ij / 2^(tau_a_i + tau_b_j). Squared, in exact rationals:
    c_s^2 k 2^(2 precision) <= magnitude^2 2^(2 s w)."""
    shift = 2 * slices * grid_step_bits(beta)
    return term_bound(slices, fast) ** 2 * k * 4 ** precision <= magnitude * magnitude * 2 ** shift


def predicted_error(slices: int, fast: bool, k: int, beta: int, magnitude: float) -> float:
    """The planned truncation level relative to (|A||B|)_ij at its smallest (for reports)."""
    if magnitude == 0:
        return math.inf
    return term_bound(slices, fast) * math.sqrt(k) * 2.0 ** (-slices * grid_step_bits(beta)) / magnitude


def _smallest(predicate, limit: int):
    return next((s for s in range(1, limit + 1) if predicate(s)), None)


def auto_plan(k: int, dtype: torch.dtype, max_span: int, magnitude: float, fast,
              digits: str = "fp16") -> SlicePlan:
    """The automatic slice count: the fewest slices whose predicted truncation stays below the unit
    roundoff of the target format at the scale of (|A||B|)_ij for every (i, j). Where no count up
    to MAX_SLICES can be shown to, the exact product: all pairs of the full split when it has at
    most MAX_SLICES slices, else the correctly rounded plan (exact_fallback_plan), never a
    truncated one.

    magnitude: the smallest exact lower bound of (|A||B|)_ij 2^-(tau_a_i + tau_b_j) over rows and
    columns that are nonzero and finite (ozaki::magnitude_product); inf when there is none, 0 when
    some product is below the estimate's resolution.
    """
    precision = SIGNIFICAND_BITS[dtype]
    beta = digit_bits_for(k, digits)
    full = slices_for_bits(max_span, beta)
    exact_slices = full if full <= MAX_SLICES else None
    if magnitude == math.inf:  # no nonzero finite row meets a nonzero finite column
        need = {False: 1, True: 1}
    elif magnitude == 0:
        need = {False: None, True: None}
    else:
        exact = Fraction(magnitude)
        need = {f: _smallest(lambda s, f=f: meets_target(s, f, k, beta, precision, exact),
                             MAX_SLICES)
                for f in (False, True)}
    unresolved = " (estimate unresolved)" if magnitude == 0 else ""
    if fast is None:
        # The exact product (all pairs of the full split) when it costs at most EXACT_COST_RATIO
        # times fast mode at the planned count, or when no count meets the target.
        fast_gemms = pair_count(need[True], True) if need[True] is not None else None
        if exact_slices is not None and (
                fast_gemms is None
                or pair_count(exact_slices, False) <= EXACT_COST_RATIO * fast_gemms):
            slices, fast = exact_slices, False
        elif fast_gemms is not None:
            slices, fast = need[True], True
        elif need[False] is not None:  # only all pairs meets the target
            slices, fast = need[False], False
        else:
            return exact_fallback_plan(k, dtype, max_span, None, digits)
    elif need[fast] is not None:
        slices = need[fast]
        if not fast and exact_slices is not None:
            slices = min(slices, exact_slices)
    elif not fast and exact_slices is not None:
        slices = exact_slices
    else:
        return exact_fallback_plan(k, dtype, max_span, fast, digits)
    if not fast and slices >= full:
        reason = "exact" + (unresolved if need[False] is None else "")
    else:
        reason = "error bound"
    return _plan(slices, fast, beta, full, k, dtype, magnitude, None, reason, digits)


def exact_fallback_plan(k: int, dtype: torch.dtype, max_span: int, fast,
                        digits: str = "fp16") -> SlicePlan:
    """The plan of a product that no truncated split can be shown to keep within the error bound
    and that all pairs of the full split cannot make exact (its rows span more bits than
    MAX_SLICES slices split, or fast mode was asked for): the correctly rounded plan, so every entry
    is the exact product rounded once. Entries its slices leave undecided are computed exactly from
    the inputs (docs/accuracy.md, "Rows of wide span")."""
    plan = nearest_plan(k, dtype, max_span, None, fast, digits)
    if fast:
        why, undecided = "in fast mode", "the entries its pairs leave undecided"
    else:
        why = f"and the full split needs {plan.full_split_slices} slices, over {MAX_SLICES}"
        undecided = (f"the entries of rows or columns spanning more than the {plan.bits_captured} "
                     "bits of its slices that these leave undecided")
    reason = (f"exact: no truncated split can be shown to meet the error bound {why} (rows span "
              f"up to {max_span} bits); {undecided} are computed exactly from the inputs")
    return dataclasses.replace(plan, reason=reason)


def nearest_plan(k: int, dtype: torch.dtype, max_span: int, slices, fast,
                 digits: str = "fp16", reason: str = "correctly rounded") -> SlicePlan:
    """Slices for rounding='nearest'. Any plan gives the same (correctly rounded) bits. The fast
    plan has enough slices that the rigorous bound of the dropped part, k (2 s + 1) 2^-(s w), sits
    NEAREST_MARGIN_BITS below the unit roundoff; the exact full split (all pairs, no entry ever
    takes the slow path) is used instead when it is cheaper or, for rows spanning more bits than
    the fast plan splits, when it costs at most NEAREST_EXACT_COST_RATIO times the fast plan."""
    precision = SIGNIFICAND_BITS[dtype]
    beta = digit_bits_for(k, digits)
    w = grid_step_bits(beta)
    full = slices_for_bits(max_span, beta)
    if slices is None:
        margin = precision + NEAREST_MARGIN_BITS + ceil_log2(k)
        decided = _smallest(lambda s: s * w >= margin + ceil_log2(2 * s + 1), MAX_SLICES) or MAX_SLICES
        exact_gemms = pair_count(full, False)
        # Rows split completely within the fast plan leave only its dropped pairs to the bound,
        # and few entries take the slow path: fast mode unless the exact split is cheaper. Rows
        # spanning more bits can send many entries there: exact when within the cost ratio.
        ratio = 1 if full <= decided else NEAREST_EXACT_COST_RATIO
        if fast is False or (fast is None and full <= MAX_SLICES
                             and exact_gemms <= ratio * pair_count(decided, True)):
            slices, fast = min(full, MAX_SLICES), False
        else:
            slices, fast = decided, True
    elif fast is None:
        fast = True  # as for the other modes: fast when slices are given
    return _plan(slices, bool(fast), beta, full, k, dtype, None, "nearest", reason, digits)


def requested_plan(k: int, dtype: torch.dtype, max_span: int, slices: int, fast: bool,
                   digits: str = "fp16") -> SlicePlan:
    beta = digit_bits_for(k, digits)
    return _plan(slices, fast, beta, slices_for_bits(max_span, beta), k, dtype, None, None,
                 "requested", digits)


#: Scheme II's predicted error has no per-term safety factor (scheme I's c_s is 3 or more), so
#: its moduli are planned this many bits below the target; fewer left float32 products slightly
#: less accurate than native SGEMM (docs/accuracy.md, "Scheme II moduli count").
CRT_MARGIN_BITS = 3


def crt_plan(k: int, dtype: torch.dtype, magnitude: float, moduli=None):
    """Moduli for scheme II (backend="crt"; docs/accuracy.md, "Scheme II"): the fewest whose
    predicted truncation 2^-(t_a + 1) + 2^-(t_b + 1) (relative to 1 / (c_a_i c_b_j), the rows'
    2-norm bounds from their norm scales) stays CRT_MARGIN_BITS below the unit roundoff of the
    target format at the scale of (|A||B|)_ij for every (i, j), that is below
    2^-(precision + CRT_MARGIN_BITS) * magnitude; None when no count up to MAX_MODULI can be shown
    to (the caller then plans scheme I).

    magnitude: the exact lower bound of min (|A||B|)_ij c_a_i c_b_j over usable rows and
    columns (ozaki::crt_magnitude); inf when there is none, 0 when the estimate cannot resolve
    some product. moduli: a requested count (no estimate needed; magnitude may be None).
    """
    precision = SIGNIFICAND_BITS[dtype]
    smallest = crt.smallest_moduli(k)
    if moduli is not None and moduli < smallest:
        raise InnerDimensionError(f"moduli = {moduli} is too few for inner dimension k = {k}: "
                                  "their product cannot hold any scaled product (at least "
                                  f"{smallest} needed)")
    if moduli is not None:
        count, reason = moduli, "requested"
    elif magnitude == math.inf:  # no nonzero finite row meets a nonzero finite column
        count, reason = smallest, "error bound"
    elif magnitude == 0:
        return None
    else:
        count = crt.fewest_moduli(k, _scaled_down(magnitude, precision + CRT_MARGIN_BITS))
        if count is None:
            return None
        reason = "error bound"
    t_a, _ = crt.scale_bits(count, k)
    level = None
    if magnitude is not None and magnitude not in (0, math.inf):
        level = crt.error_level(count, k, magnitude)
    elif magnitude == math.inf:
        level = 0.0
    return SlicePlan(slices=None, fast=None, beta=None, gemms=count, bits_captured=t_a,
                     full_split_slices=None, exact=False, rounding=None, reason=reason,
                     predicted_error=level, native_level=math.sqrt(k) * 2.0 ** -precision,
                     backend="crt", moduli=count)


def _scaled_down(magnitude: float, bits: int):
    """magnitude 2^-bits exactly (magnitude positive and finite): a float where that is normal
    (so no bit is lost), else a Fraction."""
    scaled = math.ldexp(magnitude, -bits)
    return scaled if scaled >= crt.MIN_NORMAL else Fraction(magnitude) / 2 ** bits


def wide_crt_plan(k: int, dtype: torch.dtype, magnitude: float, fewer_than=None,
                  reason="error bound"):
    """Wide scheme II (docs/accuracy.md, "Wide scheme II"): rows scaled by powers of two to
    norms up to 2^t, t past scheme II's 62 bits, rounded to integers, and their product rebuilt
    exactly from exact scheme II's moduli and rounded once. The fewest moduli whose predicted
    truncation (wide_predicted_error) stays CRT_MARGIN_BITS below the unit roundoff at the scale of
    (|A||B|)_ij for every (i, j), as crt_plan's; None when 40 cannot, or the estimate cannot resolve
    every entry (magnitude 0). magnitude: as crt_plan's (not inf: crt_plan serves that case).
    fewer_than: None also where the count is at least this (a plan it would not replace)."""
    if magnitude in (0, math.inf):
        return None
    precision = SIGNIFICAND_BITS[dtype]
    count = crt.fewest_moduli(k, _scaled_down(magnitude, precision + CRT_MARGIN_BITS), wide=True)
    if count is None or (fewer_than is not None and count >= fewer_than):
        return None
    t_a, _ = crt.wide_scale_bits(count, k)
    level = crt.error_level(count, k, magnitude, wide=True)
    return SlicePlan(slices=None, fast=None, beta=None, gemms=count, bits_captured=t_a,
                     full_split_slices=None, exact=False, rounding=None, reason=reason,
                     predicted_error=level,
                     native_level=math.sqrt(k) * 2.0 ** -precision, backend="crt", moduli=count,
                     wide=True)


def _plan(slices, fast, beta, full, k, dtype, magnitude, rounding, reason, digits):
    # every pair of the full split kept: all pairs from `full` slices on, fast mode (the pairs of
    # levels below `slices`) from 2 full - 1 on
    exact = slices >= (2 * full - 1 if fast else full)
    if exact:
        level = 0.0
    else:
        level = None if magnitude is None else predicted_error(slices, fast, k, beta, magnitude)
    return SlicePlan(slices=slices, fast=fast, beta=beta, gemms=pair_count(slices, fast),
                     bits_captured=bits_captured(slices, beta), full_split_slices=full,
                     exact=exact, rounding=rounding, reason=reason,
                     predicted_error=level,
                     native_level=math.sqrt(k) * 2.0 ** -SIGNIFICAND_BITS[dtype], backend=digits)


def exact_crt_plan(k: int, dtype: torch.dtype, bound: Fraction, rounding, reason: str):
    """Exact scheme II (docs/accuracy.md, "Exact scheme II"): rows scaled by powers of two to
    integers, so nothing is truncated, and the fewest moduli whose product recovers every
    |A'B'|_ij <= bound; the product is computed exactly and rounded once. None when 40 moduli
    cannot hold the bound (the caller plans another exact path)."""
    count = crt.exact_moduli(bound)
    if count is None:
        return None
    bits = math.ceil(math.log2(bound) / 2) if bound > 1 else 0
    return SlicePlan(slices=None, fast=None, beta=None, gemms=count, bits_captured=bits,
                     full_split_slices=None, exact=True, rounding=rounding, reason=reason,
                     predicted_error=0.0, native_level=math.sqrt(k) * 2.0 ** -SIGNIFICAND_BITS[dtype],
                     backend="crt", moduli=count)
