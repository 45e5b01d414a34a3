"""Bitwise reproducibility check (`python -m ozaki.study reproducibility`).

Computes dgemm and sgemm products in several modes of every requested backend under every requested
CPU thread count and on every requested CUDA device (default stream and a side stream), `repeats`
times each, and compares the bit patterns of every result with the first setting's first run. NaN
payloads and the sign of zero count: the comparison is on the raw bits. Each setting of each
product starts with nothing kept from earlier calls (forget_kept_parts), so its first run computes
every part of the product under that setting, and its later runs use the parts it kept.
"""

import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import torch

import ozaki
from ozaki import accuracy, repeated, replay, speculation
from ozaki.cli import device_name
from ozaki.fixed_counts import AccuracyWarning

#: The backends the check can pass to ozaki (backend=), and those it checks by default.
BACKENDS = ("fp16", "int8", "crt", "auto")
DEFAULT_BACKENDS = ("fp16", "int8", "crt")
#: (label suffix, dtype, options) per backend: the automatic plan, the correctly rounded mode and,
#: for scheme I, a short fast plan (most of the product is truncated, so any change in the
#: summation shows) and all pairs; for scheme II, short moduli counts (coarse scaling).
_SCHEME_ONE = [("", torch.float64, {}),
               ("nearest", torch.float64, {"rounding": "nearest"}),
               ("s=3 fast", torch.float64, {"slices": 3, "fast": True}),
               ("s=6 all pairs", torch.float64, {"slices": 6, "fast": False}),
               ("", torch.float32, {}),
               ("nearest", torch.float32, {"rounding": "nearest"}),
               ("s=2 fast", torch.float32, {"slices": 2, "fast": True})]
#: Moduli counts of the crt products, each at least crt.smallest_moduli(k) for every k <= 2^17 - 1.
MODULI_COUNTS = (8, 4)
_BACKEND_PRODUCTS = {
    "fp16": _SCHEME_ONE,
    "int8": _SCHEME_ONE,
    "crt": [("", torch.float64, {}),
            ("nearest", torch.float64, {"rounding": "nearest"}),
            (f"moduli={MODULI_COUNTS[0]}", torch.float64, {"moduli": MODULI_COUNTS[0]}),
            ("", torch.float32, {}),
            ("nearest", torch.float32, {"rounding": "nearest"}),
            (f"moduli={MODULI_COUNTS[1]}", torch.float32, {"moduli": MODULI_COUNTS[1]})],
    "auto": [("", torch.float64, {}),
             ("nearest", torch.float64, {"rounding": "nearest"}),
             ("", torch.float32, {}),
             ("nearest", torch.float32, {"rounding": "nearest"})],
}


def products(backends=DEFAULT_BACKENDS):
    """(label, dtype, options) of every product, backend by backend: labels such as 'dgemm fp16',
    'dgemm crt nearest', 'sgemm int8 s=2 fast'; options always hold backend=."""
    found = []
    for backend in dict.fromkeys(backends):
        for suffix, dtype, options in _BACKEND_PRODUCTS[backend]:
            name = "dgemm" if dtype == torch.float64 else "sgemm"
            label = " ".join(filter(None, [name, backend, suffix]))
            found.append((label, dtype, {"backend": backend, **options}))
    return found


#: The products of the default backends.
PRODUCTS = products()
DEFAULT_SHAPES = [(67, 300, 45), (128, 1025, 96), (9, 4097, 33)]
BIT_VIEWS = {torch.float64: torch.int64, torch.float32: torch.int32}


@dataclass(frozen=True)
class Setting:
    """Where a product is computed: the CPU with a thread count, or a CUDA device and stream."""

    device: torch.device
    threads: int = None
    side_stream: bool = False

    def label(self):
        if self.device.type == "cpu":
            return f"cpu threads={self.threads}"
        return f"{self.device} side stream" if self.side_stream else str(self.device)


def settings_for(devices, threads):
    """Every CPU thread count for the CPU, default and side stream for each CUDA device."""
    found = []
    for device in devices:
        if device.type == "cpu":
            found += [Setting(device, threads=t) for t in threads]
        else:
            found += [Setting(device), Setting(device, side_stream=True)]
    return found


@contextmanager
def cpu_threads(count):
    saved = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


@contextmanager
def side_stream(device):
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        yield
    torch.cuda.current_stream(device).wait_stream(stream)


def forget_kept_parts():
    """Drops what ozaki keeps between calls: the kept parts of repeated left operands
    (ozaki.repeated), the replayed graphs (ozaki.replay) and the plans guessed from earlier
    products (ozaki.speculation). Else a setting's products of the same A would use parts made
    under an earlier setting, and that setting's own computation of them would go unchecked."""
    repeated.clear()
    replay.clear()
    speculation.forget()


def compute(setting, dtype, options, A, B):
    """The product on `setting`, as a CPU tensor."""
    gemm = ozaki.dgemm if dtype == torch.float64 else ozaki.sgemm
    a, b = A.to(setting.device), B.to(setting.device)
    threads = cpu_threads(setting.threads) if setting.threads else nullcontext()
    stream = side_stream(setting.device) if setting.side_stream else nullcontext()
    with threads, stream, warnings.catch_warnings():
        # the short fixed counts are chosen on purpose: only their bits matter here
        warnings.simplefilter("ignore", AccuracyWarning)
        C = gemm(a, b, **options)
    return C.cpu()


@dataclass
class Difference:
    product: str
    shape: tuple
    setting: str
    run: int
    entries: int     # entries whose bits differ from the reference
    first: tuple     # (i, j) of the first one


@dataclass
class Report:
    reference: str                # the setting every result is compared with
    settings: list                # labels of every setting
    products: int                 # products per setting and run
    shapes: list
    repeats: int
    compared: int = 0             # results compared with the reference
    differences: list = field(default_factory=list)

    @property
    def reproducible(self):
        return not self.differences

    def verdict(self):
        """One line, starting with REPRODUCIBLE: or NOT REPRODUCIBLE:."""
        where = ", ".join(self.settings)
        if self.reproducible:
            return (f"REPRODUCIBLE: {self.products} products x {len(self.shapes)} shapes, "
                    f"{self.compared} results bitwise identical across {where} "
                    f"({self.repeats} runs each)")
        first = self.differences[0]
        m, k, n = first.shape
        return (f"NOT REPRODUCIBLE: {len(self.differences)} of {self.compared} results differ "
                f"from {self.reference} run 1; first: {first.product} {m}x{k}x{n} on "
                f"{first.setting} run {first.run}, {first.entries} entries differ (first at "
                f"{list(first.first)})")


def differing_entries(result, reference):
    """(count, first (i, j)) of the entries whose bit patterns differ."""
    view = BIT_VIEWS[result.dtype]
    mask = result.view(view) != reference.view(view)
    count = int(mask.sum())
    first = tuple(int(i) for i in mask.nonzero()[0]) if count else None
    return count, first


def check(shapes, devices, threads, seed=0, phi=1.0, repeats=2, progress=None,
          backends=DEFAULT_BACKENDS):
    """Report of the bitwise comparison of the products of `backends` (BACKENDS); `progress`
    (ozaki.progress.Progress or None) steps once per (shape, product). Clears what ozaki keeps
    between calls before each setting of each product (forget_kept_parts)."""
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise ValueError(f"check: backends must be among {', '.join(BACKENDS)}, got "
                         f"{unknown[0]!r}")
    for count in threads:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"check: threads must hold CPU thread counts of at least 1, got "
                             f"{count!r}")
    settings = settings_for(devices, threads)
    if not shapes or len(settings) * repeats < 2 or repeats < 1:
        raise ValueError(f"check: {len(shapes)} shapes, {len(settings)} settings and repeats = "
                         f"{repeats} compare nothing; give shapes, and repeats >= 2 or more than "
                         "one setting (devices, threads)")
    chosen = products(backends)
    report = Report(settings[0].label(), [s.label() for s in settings], len(chosen),
                    [tuple(s) for s in shapes], repeats)
    for shape in shapes:
        m, k, n = shape
        generator = torch.Generator().manual_seed(seed)
        A = accuracy.phi_matrix(m, k, phi, generator)
        B = accuracy.phi_matrix(k, n, phi, generator)
        for label, dtype, options in chosen:
            a, b = A.to(dtype), B.to(dtype)
            reference = None
            for setting in settings:
                forget_kept_parts()
                for run in range(1, repeats + 1):
                    result = compute(setting, dtype, options, a, b)
                    if reference is None:
                        reference = result
                        continue
                    report.compared += 1
                    count, first = differing_entries(result, reference)
                    if count:
                        report.differences.append(
                            Difference(label, tuple(shape), setting.label(), run, count, first))
            if progress is not None:
                progress.step(f"{m}x{k}x{n} {label}")
    return report


def describe_devices(devices):
    return "; ".join(f"{device}: {device_name(device)}" for device in devices)
