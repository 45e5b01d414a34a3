"""The accuracy check of a count the caller fixed (slices= or moduli=; docs/accuracy.md, "Fixed
counts").

A fixed count keeps its documented bound, which is relative to the rows' scales: 2^tau_i 2^tau_j
for scheme I, the rows' 2-norm bounds for scheme II. Entries of the product far below those scales
(rows of wide span, huge entries meeting tiny ones) can lose most of their digits. The check
predicts the count's error relative to (|A||B|)_ij over a sample of rows of A and columns of B,
exactly as the planner predicts it from its estimate, and the call warns (AccuracyWarning) when the
prediction is far above native's level.

The sample: per operand, the SAMPLED_ROWS rows with the widest bit spans and SAMPLED_ROWS evenly
spaced ones (all rows of smaller operands), and, in a batch, the elements holding the widest row
of A and the widest column of B and SAMPLED_ELEMENTS evenly spaced ones. Their |A||B| is computed in
float64 from the rows scaled by 2^-tau (exact): sums of nonnegative terms, within a factor 1 + k u
of the exact value, which does not matter to a warning threshold.
"""

import dataclasses
import math
import warnings
from fractions import Fraction

import torch

from .moduli import norm_scale_factor, times_two_to_the
from .moduli import predicted_error as moduli_predicted_error
from .planner import auto_plan, crt_plan, predicted_error

SAMPLED_ROWS = 32
SAMPLED_ELEMENTS = 4
#: A fixed count warns when its predicted error exceeds native's level sqrt(k) u by this factor.
FAR_ABOVE_NATIVE = 16


class AccuracyWarning(UserWarning):
    """A count the caller fixed (moduli=, slices=) is predicted to be far less accurate than the
    native product on these operands (docs/accuracy.md, "Fixed counts")."""


def _spaced(count, length, device):
    """count evenly spaced indices of range(length), first and last included (count >= 2)."""
    return torch.arange(count, device=device) * (length - 1) // (count - 1)


def _sampled(span, usable, count):
    """Indices of the `count` usable rows of widest span (ties: the first) and of `count` evenly
    spaced rows (a row may come twice: it only repeats entries); every row when there are at most
    2 * count. No device-to-host read."""
    rows = span.numel()
    if rows <= 2 * count:
        return torch.arange(rows, device=span.device)
    key = torch.where(usable, span.long(), -1)
    widest = torch.sort(key, descending=True, stable=True).indices[:count]
    return torch.cat([widest, _spaced(count, rows, span.device)])


def _scaled_abs(rows, tau):
    """|rows| 2^-tau (one tau per row) in float64, exactly (tau ranges over [-1074, 1024))."""
    return times_two_to_the(rows.double().abs(), -tau.long()[..., None])


class Sample:
    """The sampled entries of a product: `magnitudes` (elements, rows, columns) holds
    (|A||B|)_ij 2^-(tau_i + tau_j) (inf where the row or column is not usable: zero, NaN or Inf),
    `rows_a` and `rows_b` the flattened row indices of a and bt (elements * rows and
    elements * columns) that the entries belong to."""

    def __init__(self, magnitudes, rows_a, rows_b):
        self.magnitudes, self.rows_a, self.rows_b = magnitudes, rows_a, rows_b


def sample_product(a, bt, stats_a, stats_b, usable_a, usable_b, combine_sum):
    """The Sample of a @ bt^T for a (m, k), bt (n, k) or batches (E, m, k), (E, n, k);
    combine_sum adds the magnitudes of k-shards up (identity on one device)."""
    batched = a.dim() == 3
    a3, b3 = (a, bt) if batched else (a[None], bt[None])
    elements, m, n = a3.shape[0], a3.shape[1], b3.shape[1]
    span_a, span_b = stats_a[1].view(elements, m), stats_b[1].view(elements, n)
    use_a, use_b = usable_a.view(elements, m), usable_b.view(elements, n)
    picked = torch.arange(elements, device=a.device)
    if elements > SAMPLED_ELEMENTS + 2:
        widest = [torch.where(use, span.long(), -1).flatten().argmax().reshape(1) // span.shape[1]
                  for span, use in ((span_a, use_a), (span_b, use_b))]
        picked = torch.cat(widest + [_spaced(SAMPLED_ELEMENTS, elements, a.device)])
    rows = _sampled(torch.where(use_a[picked], span_a[picked], -1).amax(0), use_a[picked].any(0),
                    SAMPLED_ROWS)
    cols = _sampled(torch.where(use_b[picked], span_b[picked], -1).amax(0), use_b[picked].any(0),
                    SAMPLED_ROWS)
    rows_a = (picked[:, None] * m + rows[None, :]).flatten()
    rows_b = (picked[:, None] * n + cols[None, :]).flatten()
    a_s = _scaled_abs(a3.reshape(elements * m, -1)[rows_a], stats_a[0][rows_a])
    b_s = _scaled_abs(b3.reshape(elements * n, -1)[rows_b], stats_b[0][rows_b])
    shape_a, shape_b = (picked.numel(), rows.numel(), -1), (picked.numel(), cols.numel(), -1)
    magnitudes = combine_sum(torch.bmm(a_s.view(shape_a), b_s.view(shape_b).mT))
    unused = ~usable_a[rows_a].view(shape_a[:2])[..., None] | ~usable_b[rows_b].view(shape_b[:2])[:, None, :]
    return Sample(magnitudes.masked_fill(unused, float("inf")), rows_a, rows_b)


def smallest_positive(values) -> torch.Tensor:
    """The smallest positive entry (0-d; inf when there is none): exact zeros of |A||B| are entries
    no truncation can touch."""
    positive = values.masked_fill(values <= 0, float("inf"))
    return positive.amin() if positive.numel() else values.new_tensor(float("inf"))


def warning_text(option: str, count: int, suggested) -> str:
    """The AccuracyWarning of a fixed count: names the count and the remedy."""
    planned = f"{option}={suggested} here" if suggested is not None else "exact where it must be"
    return (f"ozaki: {option}={count} is predicted to be far less accurate than the native product "
            f"on these operands (its error bound is relative to the rows' scales, and entries of "
            f"the product lie far below them); omit {option}= to let ozaki plan it ({planned}) or "
            f"pass rounding='nearest'. ozaki.plan(A, B, {option}={count}) gives the figures.")


def warn(text: str):
    warnings.warn(text, AccuracyWarning, stacklevel=3)


def power_of_two_floor(x: float) -> float:
    """The largest power of two <= x (x positive; inf stays inf): the check's |A||B| comes from
    float64 sums whose order, and so last bits, differ between devices; its power of two does
    not, except within k u of a power of two."""
    return x if x == math.inf else math.ldexp(0.5, math.frexp(x)[1])


class _HostScalar:
    """A 0-d float64 device value on its way to the host: copied without a wait where the device
    is a GPU, read by value() (which waits for that copy alone)."""

    def __init__(self, value):
        if value.device.type == "cuda":
            self._host = torch.empty((), dtype=torch.float64, pin_memory=True)
            self._host.copy_(value.reshape(()), non_blocking=True)
            self._copied = torch.cuda.Event()
            self._copied.record()
        else:
            self._host, self._copied = value.reshape(()), None

    def value(self) -> float:
        if self._copied is not None:
            self._copied.synchronize()
        return self._host.item()


class Check:
    """The check of a plan whose count the caller fixed. Started before the product and finished
    after it is launched, so the host never waits before launching it.

    est: the operands' Estimates (ozaki/product.py); norms: scheme II's norm scale codes of a's and
    bt's rows (None for scheme I)."""

    def __init__(self, plan, est, dtype, norms=None):
        self.plan, self.est, self.dtype = plan, est, dtype
        sample = est.fixed_count_sample()
        values = sample.magnitudes
        if norms is not None:  # (|A||B|)_ij c_i c_j: times c 2^tau of the rows (exact factors)
            rows, cols = values.shape[1:]
            factor_a = norm_scale_factor(est.stats_a[0][sample.rows_a], norms[0][sample.rows_a])
            factor_b = norm_scale_factor(est.stats_b[0][sample.rows_b], norms[1][sample.rows_b])
            values = values * factor_a.view(-1, rows, 1) * factor_b.view(-1, 1, cols)
        smallest = smallest_positive(values).double().reshape(1)
        self._smallest = _HostScalar(-est.combine_max(-smallest))

    def finished(self):
        """The plan with its predicted error over the sample and, where that is far above native's
        level, the AccuracyWarning's text and the count the planner would take."""
        plan, k = self.plan, self.est.k
        magnitude = power_of_two_floor(self._smallest.value())
        if plan.backend == "crt":
            level = 0.0 if magnitude == math.inf else float(
                moduli_predicted_error(plan.moduli, k) / Fraction(magnitude))
        else:
            level = predicted_error(plan.slices, plan.fast, k, plan.beta, magnitude)
        plan = dataclasses.replace(plan, predicted_error=level)
        if level <= FAR_ABOVE_NATIVE * plan.native_level:
            return plan
        if plan.backend == "crt":
            automatic = crt_plan(k, self.dtype, magnitude)
            option, count = "moduli", plan.moduli
            suggested = automatic.moduli if automatic is not None else None
        else:
            automatic = auto_plan(k, self.dtype, self.est.max_span(), magnitude, plan.fast,
                                  plan.backend)
            option, count = "slices", plan.slices
            suggested = automatic.slices if automatic.rounding is None else None
        return dataclasses.replace(plan, warning=warning_text(option, count, suggested))
