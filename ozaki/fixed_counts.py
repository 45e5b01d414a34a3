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

import warnings

import torch

from .moduli import times_two_to_the

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
    """Indices (sorted, unique) of the `count` usable rows of widest span (ties: the first) and of
    `count` evenly spaced rows; every row when there are at most 2 * count."""
    rows = span.numel()
    if rows <= 2 * count:
        return torch.arange(rows, device=span.device)
    key = torch.where(usable, span.long(), -1)
    widest = torch.sort(key, descending=True, stable=True).indices[:count]
    return torch.unique(torch.cat([widest, _spaced(count, rows, span.device)]))


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
        picked = torch.unique(torch.cat(widest + [_spaced(SAMPLED_ELEMENTS, elements, a.device)]))
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
