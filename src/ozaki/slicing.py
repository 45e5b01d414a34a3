"""Slice counts and digit widths of Ozaki scheme I with FP16 or INT8 slices (docs/algorithm.md).

Mirrors the integer formulas of csrc/scheme.h so the Python layer can report and choose plans;
tests/test_split_ops.py checks the two agree through the split operator.
"""

from dataclasses import dataclass
from typing import Optional

import torch

#: Hard limit on slices per operand (csrc/scheme.h, kMaxSlices).
MAX_SLICES = 40
#: FP16 holds 11 significand bits: digit magnitudes are capped there.
MAX_DIGIT_BITS = 11
#: Rounded INT8 digits reach +-2^beta and +128 is not an INT8 (csrc/scheme.h, kMaxInt8DigitBits).
MAX_INT8_DIGIT_BITS = 6
#: Significand bits of the formats whose products ozaki computes.
SIGNIFICAND_BITS = {torch.float64: 53, torch.float32: 24}


def ceil_log2(k: int) -> int:
    return (k - 1).bit_length() if k > 1 else 0


def digit_bits_for(k: int, digits: str = "fp16") -> int:
    """beta: slice digits satisfy |d| <= 2^beta, so 2 beta + ceil(log2 k) <= 24 keeps every FP16
    slice GEMM with FP32 accumulation exact (below 1 when k > 2^22), and
    2 beta + ceil(log2(k + 1)) <= 31 (k 2^(2 beta) < 2^31, what INT32 holds) every INT8 GEMM with
    INT32 accumulation (below 1 when k >= 2^29)."""
    if digits == "int8":
        return min(MAX_INT8_DIGIT_BITS, (31 - ceil_log2(k + 1)) // 2)
    return min(MAX_DIGIT_BITS, (24 - ceil_log2(k)) // 2)


def grid_step_bits(beta: int) -> int:
    """Digits are rounded to nearest, so every slice after the first adds beta + 1 bits."""
    return beta + 1


def bits_captured(slices: int, beta: int) -> int:
    """Bits below a row's leading power of two that `slices` slices represent exactly."""
    return beta + (slices - 1) * grid_step_bits(beta)


def slices_for_bits(bits: int, beta: int) -> int:
    """Smallest slice count with bits_captured(slices, beta) >= bits."""
    if bits <= beta:
        return 1
    step = grid_step_bits(beta)
    return 1 + -(-(bits - beta) // step)


def pair_count(slices: int, fast: bool) -> int:
    """Slice products (GEMM-equivalents of the full shape) the scheme computes."""
    return slices * (slices + 1) // 2 if fast else slices * slices


@dataclass(frozen=True)
class SlicePlan:
    """How a product is computed (ozaki.plan): the backend, slices per operand and digit width
    (scheme I) or moduli (scheme II), GEMM count, and what accuracy the choice stands for
    (docs/accuracy.md). Scheme-II plans have slices, fast, beta and full_split_slices None."""

    slices: Optional[int]
    fast: Optional[bool]
    beta: Optional[int]
    gemms: int               # low-precision GEMMs of the full shape (FP16 or INT8, see backend)
    bits_captured: int       # scheme I: bits below each row's leading power of two the slices
                             # hold; scheme II: bits of each scaled row's 2-norm bound (t_a)
    full_split_slices: Optional[int]  # slices the exact (zero-remainder) split needs
    exact: bool              # the product is computed exactly and rounded once: all pairs of the
                             # full split, or exact scheme II (rows scaled to integers)
    rounding: Optional[str]  # "nearest": every entry rounded once from the exact product (asked
                             # for, or the default's exact fallback); else None
    reason: str              # why this plan: "error bound", "exact", "requested",
                             # "correctly rounded", or a sentence for the exact fallbacks
                             # (docs/accuracy.md, "Rows of wide span")
    predicted_error: Optional[float]  # planned truncation / (|A||B|)_ij, worst entry, if known
    native_level: float      # sqrt(k) u: the Higham-Mary level of the native product's error
    backend: str = "fp16"    # "fp16", "int8" (scheme I) or "crt" (scheme II)
    moduli: Optional[int] = None  # scheme II: moduli, one INT8 GEMM each
    warning: Optional[str] = None  # the text of the warning the call gives: a fixed count
                                   # predicted far less accurate than native (AccuracyWarning,
                                   # ozaki/fixed_counts.py), or backend="crt" that scheme I
                                   # replaced (BackendWarning, ozaki/product.py)
    wide: bool = False       # scheme II with power-of-two row scales past 62 bits, rebuilt as
                             # exact scheme II rebuilds (planner.wide_crt_plan)

    def __str__(self):
        if self.backend == "crt":
            scaling = ("to exact integers with" if self.exact
                       else "by powers of two to" if self.wide else "to")
            text = (f"crt: {self.moduli} moduli ({self.gemms} INT8 GEMMs), rows scaled {scaling} "
                    f"{self.bits_captured}-bit norms; {self.reason}")
        else:
            mode = "fast" if self.fast else "all pairs"
            kind = "INT8" if self.backend == "int8" else "FP16"
            text = (f"{self.backend}: {self.slices} slices ({mode}: {self.gemms} {kind} GEMMs), "
                    f"beta = {self.beta}, {self.bits_captured} bits per row; {self.reason}")
        if self.rounding == "nearest":
            text += " (every entry rounded once from the exact product)"
        elif self.exact and self.backend == "crt":
            text += " (the exact product, rounded once)"
        elif self.exact:
            text += (" (every product of the split is exact; their float64 sum is within about "
                     "one rounding)")
        elif self.predicted_error is not None:
            text += (f"; predicted error {self.predicted_error:.1e} x |A||B| against the native "
                     f"level {self.native_level:.1e}")
        if self.warning is not None:
            text += f". Warning: {self.warning}"
        return text
