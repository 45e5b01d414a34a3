"""The accuracy check of a count the caller fixed (slices= or moduli=; docs/accuracy.md, "Fixed
counts").

A fixed count keeps its documented bound, which is relative to the rows' scales: 2^tau_i 2^tau_j
for scheme I, the rows' 2-norm bounds for scheme II. Entries of the product far below those scales
(rows of wide span, huge entries meeting tiny ones) can lose most of their digits. The check
predicts the count's error relative to (|A||B|)_ij over a sample of rows of A and columns of B,
as the planner predicts it from its estimate, and the call warns (AccuracyWarning) when the
prediction is far above native's level.

The sample: per operand, the SAMPLED_ROWS rows with the widest bit spans and SAMPLED_ROWS evenly
spaced ones (all rows of smaller operands), and, in a batch, the elements holding the widest row
of A and the widest column of B and SAMPLED_ELEMENTS evenly spaced ones. Their |A||B| comes from
ozaki::sampled_magnitudes: float64 sums of nonnegative terms (within a factor 1 + k u of the exact
value) in one summation order, so every device reports the same figure. On a GPU the check runs
on a side stream after the product is launched, and the call waits for the check alone.
"""

import dataclasses
import math
import os
import sys
import tempfile
import warnings

import torch

from . import _ops, crt
from .host_copy import HostCopy
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


def _sampled_elements(span_a, use_a, span_b, use_b):
    """The batch elements the check looks at (an element may come twice)."""
    elements = span_a.shape[0]
    if elements <= SAMPLED_ELEMENTS + 2:
        return torch.arange(elements, device=span_a.device)
    widest = [torch.where(use, span.long(), -1).flatten().argmax().reshape(1) // span.shape[1]
              for span, use in ((span_a, use_a), (span_b, use_b))]
    return torch.cat(widest + [_spaced(SAMPLED_ELEMENTS, elements, span_a.device)])


def _rows_of_elements(picked, span, usable):
    """The flattened rows of the picked elements of an operand (span and usable viewed
    (elements, rows)) that the check looks at: the same rows in each, chosen by their widest span
    over those elements."""
    rows = _sampled(torch.where(usable[picked], span[picked], -1).amax(0), usable[picked].any(0),
                    SAMPLED_ROWS)
    return (picked[:, None] * span.shape[1] + rows[None, :]).flatten()


def sample_magnitudes(a, bt, stats_a, stats_b, usable_a, usable_b, norms, combine_sum):
    """The sampled (|A||B|)_ij 2^-(tau_i + tau_j) (norms None: scheme I) or (|A||B|)_ij c_i c_j
    (norms: the norm scale codes of a's and bt's rows, scheme II) of a @ bt^T, for a (m, k),
    bt (n, k) or batches (E, m, k), (E, n, k), bt possibly B's columns in place on CUDA
    (product.in_place_bt, read as they lie); +inf where not usable. combine_sum adds k-shards'
    values up (identity on one device)."""
    m, n = a.shape[-2], bt.shape[-2]
    elements = a.shape[0] if a.dim() == 3 else 1
    if m == 0 or n == 0 or elements == 0:  # a rank's empty shard: nothing of its own to sample
        return a.new_empty(0, dtype=torch.float64)
    if elements == 1:
        rows_a = _sampled(stats_a[1], usable_a, SAMPLED_ROWS)
        rows_b = _sampled(stats_b[1], usable_b, SAMPLED_ROWS)
    else:  # the same elements for both operands
        span_a, use_a = stats_a[1].view(elements, m), usable_a.view(elements, m)
        span_b, use_b = stats_b[1].view(elements, n), usable_b.view(elements, n)
        picked = _sampled_elements(span_a, use_a, span_b, use_b)
        rows_a = _rows_of_elements(picked, span_a, use_a)
        rows_b = _rows_of_elements(picked, span_b, use_b)
    norm_a, norm_b = norms if norms is not None else (None, None)
    return combine_sum(_ops.sampled_magnitudes(_ops.flat_rows(a), _ops.rows_as_read(bt),
                                               stats_a[0], stats_b[0], usable_a, usable_b, rows_a,
                                               rows_b, m, n, norm_a, norm_b))


def smallest_positive(values) -> torch.Tensor:
    """The smallest positive entry (0-d; inf when there is none): exact zeros of |A||B| are entries
    no truncation can touch."""
    positive = values.masked_fill(values <= 0, float("inf"))
    return positive.amin() if positive.numel() else values.new_tensor(float("inf"))


def warning_text(plan, option: str, count: int, suggested) -> str:
    """The AccuracyWarning of a fixed count: names the count, what its prediction rests on, the
    remedy, and the ozaki.plan call that gives the figures of the plan that ran (its backend and
    fast mode included; the backend the caller passed, auto or fp16 alike, is not known here)."""
    asked = (f"moduli={count}" if option == "moduli"
             else f"backend={plan.backend!r}, slices={count}, fast={plan.fast}")
    sampled = (f"for the sampled entries alone this mode would take {option}={suggested}"
               if suggested is not None else "exact where it must be")
    return (f"ozaki: {option}={count} is predicted to be far less accurate than the native product "
            f"on these operands (its error bound, relative to the rows' scales, predicts more than "
            f"{FAR_ABOVE_NATIVE} times native's error at the smallest sampled entry of the "
            f"product); omit {option}= to let ozaki plan it (ozaki.plan "
            f"with the call's other options shows that plan; {sampled}) or pass "
            f"rounding='nearest'. ozaki.plan(A, B, {asked}) gives the figures, for A and B as "
            f"multiplied (after ozaki.gemm's transposes; ozaki.matmul's as passed to it; a "
            f"complex product's real and imaginary parts as docs/torch.md stacks them).")


def warn(text: str, category=AccuracyWarning):
    """Issues the warning (AccuracyWarning, or another category) at the caller's line: the first
    frame outside ozaki, torch and the code torch.compile generated (the inductor's cache, FX's
    graphs; the product runs inside a torch operator), so the default filter shows it once per
    line. None while torch.compile traces, which cannot trace a warning (the compiled call would
    break its graph there)."""
    if torch.compiler.is_compiling():
        return
    not_the_callers = (os.path.dirname(__file__), os.path.dirname(torch.__file__),
                       _generated_code(), "<eval_with_key>")
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(not_the_callers):
        frame, level = frame.f_back, level + 1
    warnings.warn(text, category, stacklevel=level)


def _generated_code():
    """The folder of the code torch.compile generates (the inductor's cache: its default, or
    TORCHINDUCTOR_CACHE_DIR), read when a warning is issued."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
        return os.path.join(cache_dir(), "")
    except ImportError:  # torch without this module: its default folder's name
        return os.path.join(tempfile.gettempdir(), "torchinductor_")


def _side_stream(device, streams={}):
    """One CUDA stream per device for the checks, created on first use."""
    if device not in streams:
        streams[device] = torch.cuda.Stream(device)
    return streams[device]


class Check:
    """The check of a plan whose count the caller fixed.

    est: the operands' Estimates (ozaki/product.py); norms: scheme II's norm scale codes of a's and
    bt's rows (None for scheme I); ready: None, or a CUDA event after which the inputs are ready:
    the check then runs on a side stream that waits for it, so it overlaps the product launched
    before it and finished() waits for the check alone."""

    def __init__(self, plan, est, dtype, norms=None, ready=None):
        self.plan, self.est, self.dtype = plan, est, dtype
        if ready is None:
            self._smallest = HostCopy(self._smallest_magnitude(norms).reshape(()))
            return
        stream = _side_stream(est.a.device)
        stream.wait_event(ready)
        with torch.cuda.stream(stream):
            self._smallest = HostCopy(self._smallest_magnitude(norms).reshape(()))

    def _smallest_magnitude(self, norms):
        """The smallest positive sampled (|A||B|)_ij 2^-(tau_i + tau_j) (scheme I) or
        (|A||B|)_ij c_i c_j (scheme II), over everything that shares the plan (1-element)."""
        smallest = smallest_positive(self.est.fixed_count_sample(norms)).reshape(1)
        return smallest if not self.est.shared else -self.est.combine_max(-smallest)

    def finished(self):
        """The plan with its predicted error over the sample and, where that is far above native's
        level, the AccuracyWarning's text and the count the planner would take."""
        plan, k = self.plan, self.est.k
        magnitude = self._smallest.values()
        if plan.backend == "crt":
            level = 0.0 if magnitude == math.inf else crt.error_level(plan.moduli, k, magnitude)
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
        return dataclasses.replace(plan, warning=warning_text(plan, option, count, suggested))
