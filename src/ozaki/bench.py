"""Benchmark ozaki.dgemm / ozaki.sgemm against torch's native matmul and the GEMM floors.

    python -m ozaki.bench --sizes 2048 4096 8192 16384 --json bench.json --markdown bench.md
    python -m ozaki.bench --shape 4096 16384 2048 --device cpu
    python -m ozaki.bench --dtype float32 --modes default fixed --sgemm-slices 4 5 6
    python -m ozaki.bench --backends crt --modes default fixed --moduli 12 13 14 15 16

For every shape (m, k, n) the same run measures, on the same phi-matrix inputs:

* the native product of each --dtype: native DGEMM (torch.matmul, float64) and native SGEMM
  (torch.matmul on float32 copies, TF32 switched off for the measurement);
* the floor units, GEMMs of the full shape: the FP16 x FP16 -> FP32 GEMM (always), and the
  INT8 x INT8 -> INT32 GEMM that the int8 and crt backends run (torch.ops.ozaki.int8_matmul on
  random full-range int8 operands; whenever auto, crt or int8 is among --backends);
* for each --dtype and each of --backends (BACKENDS, in that order), the ozaki rows of the
  selected --modes, in this order:
  - default: ozaki.dgemm(A, B) / ozaki.sgemm(A32, B32) with the library's defaults for backend
    auto (the automatic backend, slice or moduli count and mode), with backend=B alone for the
    others;
  - plan: ozaki.plan on the same operands alone (the planning overhead of the default call);
  - nearest: the default call with rounding="nearest";
  - auto: the automatic slice count in fast mode (dgemm; backends fp16 and int8);
  - fixed: backends fp16 and int8: the slice counts of --slices (dgemm) and of --sgemm-slices
    (sgemm) in fast mode; backend crt: the moduli counts of --moduli (dgemm) and of
    --sgemm-moduli (sgemm), ozaki.dgemm(A, B, backend="crt", moduli=M);
  - all-pairs: the slice counts of --all-pairs-slices with fast=False (dgemm; fp16 and int8).
  Every ozaki and plan row passes backend=<its backend>, except the default row of auto:
  ozaki.dgemm(A, B) with no option at all, the product a user gets. Backend auto has only the
  default, plan and nearest rows (its other rows would be fp16 rows again), crt no auto or
  all-pairs rows.

The natives and the floor units come first, and each (dtype, backend)'s default row before the
rows compared with it ("x default"; left empty when default is not among the --modes).

Columns: backend is the row's backend, "auto>crt" (say) when the plan ran another one (what auto
chose, or the INT8 scheme I that crt's rounding="nearest" rows fall back to where exact scheme II
cannot hold the product: k > 2^17 - 1, or rows spanning hundreds of bits); slices is the slice count
(scheme I, "auto:S" when planned) or "m=M" for M moduli (scheme II); time is the median of
--repeats timed runs after --warmup untimed ones (CUDA events on the GPU, perf_counter on the
CPU); TFLOPS is DGEMM-equivalent, 2mnk / time, for every row; "x native" is the speed-up over
native DGEMM (dgemm rows) or native SGEMM (sgemm rows); the floor of an ozaki row is its number of
GEMMs (plan.gemms) times the time of the floor unit of its plan's backend (the FP16 GEMM for
fp16, the INT8 GEMM for int8 and crt), and "of floor" is floor time / ozaki time (100% would be
an ozaki product as fast as its GEMMs alone).

Accuracy: a --samples x --samples grid of entries (ozaki.accuracy.sample_entries) is checked
against exact products (ozaki.accuracy.exact_matmul), computed once per shape and selected dtype:
of the float64 inputs, and of their float32 copies (the reference of the sgemm rows). The sampled
rows of A and columns of B are gathered on the device and only they go to the host, which by the
sampling convention of ozaki.accuracy gives the same values as passing rows=/cols= with the whole
matrices, without copying whole matrices to the host for every row. Reported: median and max
relative error and max componentwise error |C - AB| / (|A||B|) over the sample.

Output: stdout has a header line (device, versions, inputs), the final table and its notes. A
progress bar (ozaki.progress) goes to stderr, one step per row, with the time each shape's inputs
and exact references took; --quiet turns it off. JSON and markdown outputs are rewritten after
every row, so an interrupted run keeps what it measured (meta.complete says whether the run
finished). A crt row (other than nearest) of a shape with k > 2^17 - 1, beyond scheme II's
limit, or with fewer --moduli than the shape's k needs (ozaki.crt.smallest_moduli), gets status
"n/a" and the run goes on.
"""

import argparse
import datetime
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

import ozaki
from ozaki import accuracy
from ozaki import crt, replay, repeated, speculation
from ozaki.cli import (DTYPE_NAMES, DTYPES, MAX_FP16_INNER, HelpFormatter,
                       check_distinct_outputs, check_operand_memory, check_output_path, check_phi,
                       check_plot_path, device_name, moduli_count, nonnegative_int,
                       per_dtype_paths, phi_value, positive_int, resolve_device, seed_value,
                       slice_count)
from ozaki.fixed_counts import AccuracyWarning
from ozaki.progress import Progress

#: Shapes with m * k * n at least this get min(--repeats, --large-repeats) timed runs.
LARGE_PRODUCT = 16384 ** 3
DEFAULT_SIZES = {"cuda": [2048, 4096, 8192], "cpu": [128, 256]}
FLOOR_FP32_OUT = "torch.mm(float16, float16, out_dtype=float32)"
FLOOR_FP16_OUT = "torch.matmul(float16, float16) -> float16 (out_dtype=float32 unsupported here)"
#: The INT8 floor unit: the exact INT8 GEMM of the int8 and crt backends (k chunked beyond its
#: limit of 2^17 - 1, one call per chunk).
FLOOR_INT8 = "torch.ops.ozaki.int8_matmul(int8 (m, k), int8 (n, k)) -> int32"
#: The ozaki routine of each operand dtype.
ROUTINES = {torch.float64: "dgemm", torch.float32: "sgemm"}
MODES = ("default", "plan", "nearest", "auto", "fixed", "all-pairs")
#: The backends of the ozaki rows, in row order (ozaki.dgemm's backend=): auto (the library's
#: choice), crt (scheme II), int8 and fp16 (scheme I with INT8 or FP16 slices).
BACKENDS = ("auto", "crt", "int8", "fp16")
#: The modes each backend has rows for: auto's other rows would be fp16 rows again, and crt's
#: fixed rows are moduli counts.
BACKEND_MODES = {"auto": ("default", "plan", "nearest"),
                 "crt": ("default", "plan", "nearest", "fixed"),
                 "int8": MODES, "fp16": MODES}
#: The floor unit of each plan backend: the GEMM its products are made of.
FLOOR_UNIT = {"fp16": "fp16", "int8": "int8", "crt": "int8"}
#: The backends whose plans may run INT8 GEMMs (the INT8 floor unit is measured for them).
INT8_BACKENDS = ("auto", "crt", "int8")


# ---------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m ozaki.bench",
        description="Time ozaki.dgemm / ozaki.sgemm with each backend against torch's native "
                    "float64/float32 matmul and the FP16- and INT8-GEMM floors, with "
                    "exact-reference accuracy on sampled entries. Inputs: "
                    "ozaki.accuracy.phi_matrix.",
        formatter_class=HelpFormatter)
    parser.add_argument("--sizes", type=positive_int, nargs="+", metavar="N",
                        help="square sizes n (n x n times n x n); default "
                             f"{DEFAULT_SIZES['cuda']} on cuda, {DEFAULT_SIZES['cpu']} on cpu "
                             "when neither --sizes nor --shape is given")
    parser.add_argument("--shape", type=positive_int, nargs=3, action="append",
                        metavar=("M", "K", "N"),
                        help="a non-square product (m x k) times (k x n); repeat for several")
    parser.add_argument("--device", default=None,
                        help="cpu, cuda or cuda:I (default: cuda if available, else cpu)")
    parser.add_argument("--phi", type=phi_value, default=0.5,
                        help="exponent spread of the inputs (rand - 0.5) * exp(phi * randn)")
    parser.add_argument("--seed", type=seed_value, default=0,
                        help="seed of the inputs and the sampled entries (same for every shape)")
    selections = [
        ("--dtype", "dtypes", list(DTYPES), "DTYPE",
         "operand precisions: float64 measures native dgemm and the ozaki dgemm rows, float32 "
         "native sgemm and the ozaki sgemm rows (on float32 copies of the inputs); the floor "
         "units are measured whatever the dtypes"),
        ("--modes", "modes", list(MODES), "MODE",
         "ozaki rows measured for each dtype and backend: default = ozaki.dgemm(A, B) / "
         "ozaki.sgemm(A, B) (backend auto: the library's defaults; others: backend=B alone); "
         "plan = ozaki.plan with the same arguments alone; nearest = the default call with "
         "rounding='nearest'; auto = automatic slice count in fast mode (dgemm; fp16 and int8); "
         "fixed = --slices (dgemm) and --sgemm-slices (sgemm) in fast mode for fp16 and int8, "
         "--moduli (dgemm) and --sgemm-moduli (sgemm) for crt; all-pairs = --all-pairs-slices "
         "with fast=False (dgemm; fp16 and int8). Backend auto has only default, plan and "
         "nearest rows. Natives and floor units are always measured; without default, the "
         "'x default' column stays empty"),
        ("--backends", "backends", list(BACKENDS), "BACKEND",
         "backends of the ozaki rows (ozaki.dgemm's backend=): auto = the library's choice, crt "
         "= scheme II (INT8 GEMMs on residues), int8 / fp16 = scheme I with INT8 / FP16 slices. "
         "The INT8 floor unit is measured when auto, crt or int8 is among them"),
    ]
    for option, dest, choices, metavar, text in selections:
        # --modes: None when not given (every mode, each where it measures rows)
        parser.add_argument(option, nargs="+", choices=choices,
                            default=None if dest == "modes" else list(choices), dest=dest,
                            metavar=metavar, help=text)
    fixed_counts = [
        ("--slices", slice_count, [8, 10, 12], "fixed slice counts timed with ozaki.dgemm in "
                                               "fast mode, backends fp16 and int8 (mode fixed)"),
        ("--sgemm-slices", slice_count, [], "fixed slice counts timed with ozaki.sgemm in fast "
                                            "mode, backends fp16 and int8 (mode fixed)"),
        ("--all-pairs-slices", slice_count, [8], "fixed slice counts timed with ozaki.dgemm and "
                                                 "fast=False, backends fp16 and int8 (mode "
                                                 "all-pairs)"),
        ("--moduli", moduli_count, [14, 15, 16], "moduli counts (1..16) timed with ozaki.dgemm "
                                                 "and backend='crt' (mode fixed)"),
        ("--sgemm-moduli", moduli_count, [7, 8], "moduli counts (1..16) timed with ozaki.sgemm "
                                                 "and backend='crt' (mode fixed)"),
    ]
    for option, count_type, default, text in fixed_counts:
        parser.add_argument(option, type=count_type, nargs="*", default=default,
                            metavar="S" if count_type is slice_count else "M", help=text)
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="timed runs per row (the median is reported)")
    parser.add_argument("--large-repeats", type=positive_int, default=3,
                        help="timed runs per row when m*k*n >= 16384^3 (at most --repeats)")
    parser.add_argument("--warmup", type=nonnegative_int, default=2,
                        help="untimed runs before the timed ones")
    parser.add_argument("--samples", type=positive_int, default=16,
                        help="sampled rows and columns for the exact accuracy check")
    parser.add_argument("--json", metavar="PATH", help="write all rows and metadata as JSON")
    parser.add_argument("--plot", metavar="PATH",
                        help="draw throughput against n (square shapes) with ozaki.plots: PATH "
                             "(.png, .pdf, .svg) for one --dtype, PATH-float64 / PATH-float32 for "
                             "both; needs matplotlib")
    parser.add_argument("--markdown", metavar="PATH",
                        help="write the table as markdown (for docs/benchmarks.md)")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bar, nor input and reference times, on stderr")
    parser.add_argument("--fresh", action="store_true",
                        help="time every ozaki call as a first call: no kept parts of A "
                             "(ozaki.repeated), no replayed graphs and no plan guessed from "
                             "earlier calls (ozaki.speculation). By default the timed calls "
                             "repeat on the same operands, as in a user's loop, and from the "
                             "second call on those serve where they apply (the notes say so)")
    return parser


def _shapes(args, device):
    shapes = [(n, n, n) for n in args.sizes or []] + [tuple(s) for s in args.shape or []]
    return shapes or [(n, n, n) for n in DEFAULT_SIZES[device.type]]


def _in_order(chosen, available):
    """The chosen names once each, in the order of `available` (which sets the row order)."""
    return [name for name in available if name in chosen]


def parse_args(argv=None):
    """Parsed and validated arguments; adds .device (torch.device) and .shapes [(m, k, n)], and
    puts .dtypes, .modes and .backends in their canonical order."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.dtypes = _in_order(args.dtypes, DTYPES)
    modes_given = args.modes is not None
    args.modes = _in_order(args.modes or MODES, MODES)
    args.backends = _in_order(args.backends, BACKENDS)
    args.device = resolve_device(parser, args.device)
    args.shapes = _shapes(args, args.device)
    for m, k, n in args.shapes:
        if k > MAX_FP16_INNER:
            parser.error(f"argument --sizes/--shape: inner dimension k = {k} exceeds 2^22, "
                         "ozaki's limit for exact FP16 slice products")
    check_operand_memory(parser, "--sizes/--shape", args.shapes, [args.device])
    if modes_given:
        _check_modes_measure_rows(parser, args)
    _check_counts_measure_rows(parser, args)
    check_output_path(parser, "--json", args.json)
    check_output_path(parser, "--markdown", args.markdown)
    if args.plot and not any(m == k == n for m, k, n in args.shapes):
        parser.error("argument --plot: the throughput figure needs square shapes (--sizes)")
    check_distinct_outputs(parser, [
        ("--json", "the rows", args.json, [args.json]),
        ("--markdown", "the table", args.markdown, [args.markdown]),
        ("--plot", "a figure", args.plot,
         per_dtype_paths(args.plot, args.dtypes).values() if args.plot else [])])
    check_plot_path(parser, "--plot", args.plot)  # after the arguments: it needs matplotlib
    check_phi(parser, [args.phi], args.shapes, args.seed, [DTYPES[name] for name in args.dtypes])
    return args


def _check_modes_measure_rows(parser, args):
    """Every mode given with --modes measures some ozaki row with the selected dtypes, backends
    and counts (a mode that measures none, as fixed with backend auto alone, is named, not run as
    nothing)."""
    counts = dict(slices=args.slices, sgemm_slices=args.sgemm_slices,
                  all_pairs_slices=args.all_pairs_slices, moduli=args.moduli,
                  sgemm_moduli=args.sgemm_moduli)
    for mode in args.modes:
        specs = row_specs(dtypes=args.dtypes, modes=[mode], backends=args.backends, **counts)
        if not any(spec.kind in ("ozaki", "plan") for spec in specs):
            parser.error(
                f"argument --modes: {mode} measures no row with --dtype {' '.join(args.dtypes)} "
                f"and --backends {' '.join(args.backends)} ({MODE_NEEDS[mode]})")


#: Per count option: its args attribute, which rows take its counts (as (dtype, backends, fast
#: or None for moduli)) and what they need (for _check_counts_measure_rows' message).
COUNT_OPTIONS = {
    "--slices": ("slices", (torch.float64, ("fp16", "int8"), True),
                 "mode fixed, backend fp16 or int8 and --dtype float64"),
    "--sgemm-slices": ("sgemm_slices", (torch.float32, ("fp16", "int8"), True),
                       "mode fixed, backend fp16 or int8 and --dtype float32"),
    "--all-pairs-slices": ("all_pairs_slices", (torch.float64, ("fp16", "int8"), False),
                           "mode all-pairs, backend fp16 or int8 and --dtype float64"),
    "--moduli": ("moduli", (torch.float64, ("crt",), None),
                 "mode fixed, backend crt and --dtype float64"),
    "--sgemm-moduli": ("sgemm_moduli", (torch.float32, ("crt",), None),
                       "mode fixed, backend crt and --dtype float32"),
}


def _takes_counts(spec, dtype, backends, fast):
    """Whether `spec` is a row of the counts of COUNT_OPTIONS' (dtype, backends, fast)."""
    if spec.kind != "ozaki" or spec.dtype != dtype or spec.backend not in backends:
        return False
    if fast is None:
        return spec.moduli is not None
    return spec.slices is not None and spec.fast is fast


def _check_counts_measure_rows(parser, args):
    """Every count list given (not left at its default, nor given empty) measures some row with
    the selected dtypes, backends and modes: --moduli without backend crt, say, is named, not
    dropped in silence (as the study refuses it)."""
    specs = row_specs(dtypes=args.dtypes, modes=args.modes, backends=args.backends,
                      slices=args.slices, sgemm_slices=args.sgemm_slices,
                      all_pairs_slices=args.all_pairs_slices, moduli=args.moduli,
                      sgemm_moduli=args.sgemm_moduli)
    for option, (dest, takers, needs) in COUNT_OPTIONS.items():
        counts = getattr(args, dest)
        # argparse leaves the default list object itself where the option is not given
        if counts is parser.get_default(dest) or not counts:
            continue
        if not any(_takes_counts(spec, *takers) for spec in specs):
            parser.error(f"argument {option}: its counts measure no row with --dtype "
                         f"{' '.join(args.dtypes)}, --backends {' '.join(args.backends)} and "
                         f"--modes {' '.join(args.modes)} (they run with {needs})")


#: What each mode needs to measure a row (for _check_modes_measure_rows' message).
MODE_NEEDS = {
    "default": "every backend has it", "plan": "every backend has it",
    "nearest": "every backend has it",
    "auto": "it runs with backend fp16 or int8 and --dtype float64",
    "fixed": "it runs with backend fp16 or int8 and counts of --slices (float64) or "
             "--sgemm-slices (float32), or backend crt and counts of --moduli (float64) or "
             "--sgemm-moduli (float32)",
    "all-pairs": "it runs with backend fp16 or int8, --dtype float64 and counts of "
                 "--all-pairs-slices"}


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed_call(fn, device):
    """(milliseconds, result) of one call, the device's work included."""
    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        result = fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end), result
    begin = time.perf_counter()
    result = fn()
    return (time.perf_counter() - begin) * 1e3, result


def time_call(fn, device, warmup, repeats):
    """Times (ms) of `repeats` calls after `warmup` untimed ones, and the last call's result."""
    result = None
    for _ in range(warmup):
        result = None  # let the previous output go before the next is allocated
        result = fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        result = None
        elapsed, result = _timed_call(fn, device)
        times.append(elapsed)
    return times, result


@contextmanager
def native_matmul():
    """torch's own products, the native baseline: no function mode (an ozaki.enable block the
    caller is in) between the call and torch, and real FP32 for SGEMM: CUDA's TF32 and the CPU's
    oneDNN reduced precision (bf16 or TF32, which torch.set_float32_matmul_precision("medium")
    turns on) switched off and the caller's settings restored after, through torch's
    fp32_precision where it has one (its legacy flag raises once a program used that)."""
    switched = [(settings, name, getattr(settings, name)) for settings, name, _ in _FP32_SETTINGS]
    for settings, name, ieee in _FP32_SETTINGS:
        setattr(settings, name, ieee)
    try:
        with torch._C.DisableTorchFunction():
            yield
    finally:
        for settings, name, saved in switched:
            setattr(settings, name, saved)


def _fp32_settings():
    """(settings, attribute, value) that make torch's float32 matmuls real FP32 on CUDA and on
    the CPU's oneDNN path, as this torch names them."""
    cuda = torch.backends.cuda.matmul
    found = [(cuda, "fp32_precision", "ieee") if hasattr(cuda, "fp32_precision")
             else (cuda, "allow_tf32", False)]
    onednn = getattr(getattr(torch.backends, "mkldnn", None), "matmul", None)
    if onednn is not None and hasattr(onednn, "fp32_precision"):
        found.append((onednn, "fp32_precision", "ieee"))
    return found


_FP32_SETTINGS = _fp32_settings()


def free_memory(device):
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def floor_gemm_kind(device):
    """FLOOR_FP32_OUT when torch.mm accepts out_dtype=float32 for half inputs here, else
    FLOOR_FP16_OUT (then the floor is measured with an FP16-output GEMM)."""
    a = torch.ones(8, 8, dtype=torch.float16, device=device)
    try:
        out = torch.mm(a, a, out_dtype=torch.float32)
    except (RuntimeError, TypeError, NotImplementedError):
        return FLOOR_FP16_OUT
    return FLOOR_FP32_OUT if out.dtype == torch.float32 else FLOOR_FP16_OUT


def _floor_gemm(a, b, kind):
    if kind == FLOOR_FP32_OUT:
        return torch.mm(a, b, out_dtype=torch.float32)
    return torch.matmul(a, b)


# ---------------------------------------------------------------------------
# Inputs and exact references
# ---------------------------------------------------------------------------


def make_inputs(shape, phi, seed, samples, device):
    """A (m x k), B (k x n) float64 phi matrices on `device` and sampled (rows, cols) lists.

    A fresh CPU generator seeded with `seed` per shape: the inputs of a shape do not depend on
    the other shapes of the run, nor on the device.
    """
    m, k, n = shape
    generator = torch.Generator().manual_seed(seed)
    A = accuracy.phi_matrix(m, k, phi, generator=generator, device=device)
    B = accuracy.phi_matrix(k, n, phi, generator=generator, device=device)
    rows, cols = accuracy.sample_entries(m, n, samples, generator=generator)
    return A, B, rows, cols


@dataclass
class Sample:
    """Indices of the sampled entries, as lists (for ozaki.accuracy) and device tensors."""

    rows: list
    cols: list
    rows_t: torch.Tensor
    cols_t: torch.Tensor

    @classmethod
    def on(cls, rows, cols, device):
        as_tensor = lambda idx: torch.tensor(idx, dtype=torch.long, device=device)  # noqa: E731
        return cls(rows, cols, as_tensor(rows), as_tensor(cols))

    def of_product(self, C):
        """C[rows][:, cols] on the CPU."""
        return C.index_select(0, self.rows_t).index_select(1, self.cols_t).cpu()


@dataclass
class ExactReference:
    """Exact products of the sampled rows of A with the sampled columns of B (CPU)."""

    A_rows: torch.Tensor
    B_cols: torch.Tensor
    exact: np.ndarray

    @classmethod
    def build(cls, A, B, sample):
        A_rows = A.index_select(0, sample.rows_t).cpu()
        B_cols = B.index_select(1, sample.cols_t).cpu()
        return cls(A_rows, B_cols, accuracy.exact_matmul(A_rows, B_cols))

    def errors(self, C_sampled):
        """Median / max relative and max componentwise error of the sampled product entries."""
        relative = accuracy.relative_errors(C_sampled, self.exact)
        componentwise = accuracy.componentwise_errors(C_sampled, self.exact, self.A_rows,
                                                      self.B_cols)
        return {"median_rel_err": float(np.median(relative)),
                "max_rel_err": float(np.max(relative)),
                "max_comp_err": float(np.max(componentwise)),
                "rounded_share": accuracy.correctly_rounded_share(C_sampled, self.exact)}


# ---------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RowSpec:
    """One measured line: what runs, on which operands (dtype), with which options."""

    method: str           # "native dgemm", "ozaki sgemm", ...
    kind: str             # "native", "floor_unit", "plan" or "ozaki"
    dtype: torch.dtype    # operand dtype (float16 / int8 for the floor units)
    slices: int = None    # requested slice count (None: automatic)
    fast: bool = None     # requested mode
    default: bool = False  # call ozaki with its own defaults (no slices / fast / moduli arguments)
    rounding: str = None  # None or "nearest"
    backend: str = None   # one of BACKENDS for ozaki and plan rows, None for native / floor rows
    moduli: int = None    # requested moduli count (crt fixed rows)

    def options(self):
        """Keyword arguments of the ozaki call: backend=<the row's backend> and what the mode
        asks for, except the default product of backend auto, which gets none at all so that it
        measures exactly what `ozaki.dgemm(A, B)` does."""
        options = {}
        if self.backend is not None and not (self.backend == "auto" and self.is_default_product):
            options["backend"] = self.backend
        if self.moduli is not None:
            options["moduli"] = self.moduli
        elif not self.default:
            options.update(slices=self.slices, fast=self.fast)
        if self.rounding:
            options["rounding"] = self.rounding
        return options

    @property
    def is_default_product(self):
        """The row every other ozaki row of its dtype and backend is compared with
        ("x default")."""
        return self.kind == "ozaki" and self.default and self.rounding is None

    def label(self):
        if self.kind not in ("ozaki", "plan"):
            return self.method
        if self.default:
            return f"{self.method} default"
        if self.moduli is not None:
            return f"{self.method} m={self.moduli}"
        slices = "auto" if self.slices is None else f"s={self.slices}"
        return f"{self.method} {slices} {'fast' if self.fast else 'all pairs'}"


def _ozaki_specs(dtype, backend, modes, fixed_slices, all_pairs_slices, fixed_moduli=()):
    """The ozaki rows of one dtype and backend among `modes` (and the modes of the backend,
    BACKEND_MODES), the default product first."""
    method = f"ozaki {ROUTINES[dtype]}"
    by_mode = [("default", RowSpec(method, "ozaki", dtype, default=True, backend=backend)),
               ("plan", RowSpec(f"{method} plan", "plan", dtype, default=True, backend=backend)),
               ("nearest", RowSpec(f"{method} nearest", "ozaki", dtype, default=True,
                                   rounding="nearest", backend=backend))]
    if backend == "crt":  # scheme II: fixed moduli counts instead of slices
        by_mode += [("fixed", RowSpec(method, "ozaki", dtype, backend=backend, moduli=count))
                    for count in fixed_moduli]
    else:
        if dtype == torch.float64:  # dgemm only, as are the all-pairs rows
            by_mode.append(("auto", RowSpec(method, "ozaki", dtype, None, True, backend=backend)))
        by_mode += [("fixed", RowSpec(method, "ozaki", dtype, s, True, backend=backend))
                    for s in fixed_slices]
        by_mode += [("all-pairs", RowSpec(method, "ozaki", dtype, s, False, backend=backend))
                    for s in all_pairs_slices]
    return [spec for mode, spec in by_mode if mode in modes and mode in BACKEND_MODES[backend]]


def floor_specs(backends):
    """The floor-unit rows: the FP16 GEMM always, the INT8 GEMM when a backend of INT8_BACKENDS
    is among `backends`."""
    specs = [RowSpec("fp16 gemm (floor unit)", "floor_unit", torch.float16)]
    if any(backend in INT8_BACKENDS for backend in backends):
        specs.append(RowSpec("int8 gemm (floor unit)", "floor_unit", torch.int8))
    return specs


def row_specs(*, dtypes, modes, backends, slices, sgemm_slices, all_pairs_slices, moduli=(),
              sgemm_moduli=()):
    """The rows measured for every shape, in order (natives and the floor units come first: the
    ozaki rows' speed-ups and floors refer to them). dtypes are names ("float64", "float32");
    slices and sgemm_slices are the fixed slice counts of dgemm and sgemm (backends fp16, int8),
    all_pairs_slices dgemm's, moduli and sgemm_moduli the fixed moduli counts (backend crt)."""
    dtypes = [DTYPES[name] for name in dtypes]
    specs = [RowSpec(f"native {ROUTINES[dtype]}", "native", dtype) for dtype in dtypes]
    specs += floor_specs(backends)
    fixed = {torch.float64: slices, torch.float32: sgemm_slices}
    all_pairs = {torch.float64: all_pairs_slices, torch.float32: ()}
    fixed_moduli = {torch.float64: moduli, torch.float32: sgemm_moduli}
    for dtype in dtypes:
        for backend in backends:
            specs += _ozaki_specs(dtype, backend, modes, fixed[dtype], all_pairs[dtype],
                                  fixed_moduli[dtype])
    return specs


#: The floor unit a floor_unit row measures, by its dtype.
FLOOR_UNIT_OF_DTYPE = {torch.float16: "fp16", torch.int8: "int8"}


@dataclass
class ShapeRun:
    """Everything the rows of one shape share."""

    shape: tuple
    device: torch.device
    warmup: int
    repeats: int
    floor_kind: str
    operands: dict       # dtype -> (A, B)
    sample: Sample
    references: dict     # dtype -> ExactReference
    native_ms: dict = field(default_factory=dict)   # dtype -> median ms of native matmul
    floor_units: dict = field(default_factory=dict)  # "fp16" / "int8" -> ms of the floor unit
    default_ms: dict = field(default_factory=dict)  # (dtype, backend) -> ms of ozaki's default

    def timed(self, fn):
        times, result = time_call(fn, self.device, self.warmup, self.repeats)
        return {"time_ms": statistics.median(times), "times_ms": times}, result


def shape_label(shape):
    m, k, n = shape
    return str(n) if m == k == n else f"{m}x{k}x{n}"


def _plan_fields(plan):
    """The SlicePlan's fields in a row; plan_backend is the backend it runs (what auto chose)."""
    return {"plan_backend": plan.backend, "slices": plan.slices, "fast": plan.fast,
            "moduli": plan.moduli, "gemms": plan.gemms, "beta": plan.beta,
            "bits_captured": plan.bits_captured, "exact": plan.exact, "wide": plan.wide,
            "plan_rounding": plan.rounding, "plan_reason": plan.reason,
            "predicted_error": plan.predicted_error,
            # a fixed count's AccuracyWarning (a BackendWarning's text is the plan's warning too)
            "accuracy_warning": plan.warning is not None and plan.reason == "requested"}


def measure_native(spec, run):
    A, B = run.operands[spec.dtype]
    with native_matmul():
        fields, C = run.timed(lambda: torch.matmul(A, B))
    run.native_ms[spec.dtype] = fields["time_ms"]
    fields.update(run.references[spec.dtype].errors(run.sample.of_product(C)))
    return fields


def _fp16_floor_call(run):
    m, k, n = run.shape
    a = torch.empty(m, k, dtype=torch.float16, device=run.device).uniform_(-1, 1)
    b = torch.empty(k, n, dtype=torch.float16, device=run.device).uniform_(-1, 1)
    return lambda: _floor_gemm(a, b, run.floor_kind), {}


def int8_chunks(k):
    """(chunks, width): the fewest equal slices of the inner dimension that int8_matmul accepts
    (k <= 2^17 - 1 keeps its INT32 sums of full-range INT8 products exact)."""
    chunks = -(-k // crt.MAX_INNER)
    return chunks, -(-k // chunks)


def _int8_floor_call(run):
    """The INT8 GEMM of the full shape on random full-range int8 operands, a (m, k) and bt (n, k)
    as the int8 and crt backends lay them out; one call per chunk of k beyond int8_matmul's
    limit."""
    m, k, n = run.shape
    chunks, width = int8_chunks(k)
    pieces = []
    for start in range(0, k, width):
        columns = min(width, k - start)
        pieces.append((torch.randint(-128, 128, (m, columns), dtype=torch.int8, device=run.device),
                       torch.randint(-128, 128, (n, columns), dtype=torch.int8, device=run.device)))

    def call():
        for a, bt in pieces:
            out = None  # let the previous chunk's output go first
            out = torch.ops.ozaki.int8_matmul(a, bt)
        return out

    return call, ({"k_chunks": chunks} if chunks > 1 else {})


def measure_floor_unit(spec, run):
    unit = FLOOR_UNIT_OF_DTYPE[spec.dtype]
    call, extra = (_int8_floor_call if unit == "int8" else _fp16_floor_call)(run)
    fields, _ = run.timed(call)
    run.floor_units[unit] = fields["time_ms"]
    fields["gemms"] = 1
    fields.update(extra)
    return fields


def measure_plan(spec, run):
    A, B = run.operands[spec.dtype]
    fields, plan = run.timed(lambda: ozaki.plan(A, B, **spec.options()))
    fields.update(_plan_fields(plan))
    default_ms = run.default_ms.get((spec.dtype, spec.backend))
    if default_ms:
        fields["share_of_default"] = fields["time_ms"] / default_ms
    return fields


def measure_ozaki(spec, run):
    A, B = run.operands[spec.dtype]
    product = getattr(ozaki, ROUTINES[spec.dtype])
    fields = _plan_fields(ozaki.plan(A, B, **spec.options()))
    with warnings.catch_warnings():
        # a swept fixed count's AccuracyWarning is the row's accuracy_warning, not a line per call
        warnings.simplefilter("ignore", AccuracyWarning)
        timing, C = run.timed(lambda: product(A, B, **spec.options()))
    fields.update(timing)
    default_ms = run.default_ms.get((spec.dtype, spec.backend))
    if spec.is_default_product:
        run.default_ms[spec.dtype, spec.backend] = timing["time_ms"]
    elif default_ms:
        fields["vs_default"] = timing["time_ms"] / default_ms
    fields.update(run.references[spec.dtype].errors(run.sample.of_product(C)))
    return fields


MEASURE = {"native": measure_native, "floor_unit": measure_floor_unit, "plan": measure_plan,
           "ozaki": measure_ozaki}


def _ratio(numerator, denominator):
    return numerator / denominator if numerator and denominator else None


def derived_fields(spec, run, fields):
    """TFLOPS, speed-up over the native routine of the same precision, floor and share of it."""
    m, k, n = run.shape
    time_ms = fields.get("time_ms")
    derived = {}
    if spec.kind in ("native", "ozaki", "floor_unit") and time_ms:
        derived["tflops"] = 2.0 * m * k * n / (time_ms * 1e-3) / 1e12
    if spec.kind in ("native", "ozaki"):
        derived["speedup"] = _ratio(run.native_ms.get(spec.dtype), time_ms)
        derived["speedup_vs"] = f"native {ROUTINES[spec.dtype]}"
    unit = FLOOR_UNIT.get(fields.get("plan_backend"))
    if spec.kind == "ozaki" and fields.get("gemms") and run.floor_units.get(unit):
        derived["floor_unit"] = unit
        derived["floor_ms"] = fields["gemms"] * run.floor_units[unit]
        derived["of_floor"] = _ratio(derived["floor_ms"], time_ms)
    return derived


def unsupported(spec, run):
    """Why the row cannot run on this shape, or None: scheme II (backend crt, but not its
    rounding="nearest" rows, which fall back to INT8 scheme I where exact scheme II cannot hold
    the product) needs k <= 2^17 - 1, and a fixed moduli count of at least
    ozaki.crt.smallest_moduli(k) (fewer leave no scale for the operands)."""
    if spec.kind not in ("ozaki", "plan") or spec.backend != "crt" or spec.rounding is not None:
        return None
    k = run.shape[1]
    if k > crt.MAX_INNER:
        return f"backend crt needs k <= {crt.MAX_INNER}, got k = {k}"
    if spec.moduli is not None and spec.moduli < crt.smallest_moduli(k):
        return f"k = {k} needs at least {crt.smallest_moduli(k)} moduli, got {spec.moduli}"
    return None


def measure_row(spec, run):
    """One row as a dict; status "OOM" when the device ran out of memory, "n/a" (with a note)
    when the row's backend cannot take the shape."""
    m, k, n = run.shape
    row = {"shape": shape_label(run.shape), "m": m, "k": k, "n": n, "method": spec.method,
           "kind": spec.kind, "dtype": DTYPE_NAMES[spec.dtype], "backend": spec.backend,
           "default": spec.default,
           "slices_requested": spec.slices, "fast_requested": spec.fast,
           "moduli_requested": spec.moduli, "fast": spec.fast,
           "slices": None, "repeats": run.repeats, "status": "ok"}
    reason = unsupported(spec, run)
    if reason:
        row.update(status="n/a", note=reason)
        return row
    out_of_memory = False
    try:
        fields = MEASURE[spec.kind](spec, run)
    except torch.cuda.OutOfMemoryError:
        out_of_memory = True
    if out_of_memory:  # outside the except block: the traceback no longer holds tensors
        row["status"] = "OOM"
        free_memory(run.device)
        return row
    row.update(fields)
    row.update(derived_fields(spec, run, fields))
    return row


# ---------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------


def _time(ms):
    if ms is None:
        return ""
    return f"{ms:.2f}" if ms >= 1 else f"{ms:.3g}"


def _number(value):
    if value is None:
        return ""
    return f"{value:.2f}" if value >= 1 else f"{value:.3g}"


def _error(value):
    if value is None:
        return ""
    return "0" if value == 0 else f"{value:.1e}"


def _ratio_cell(value):
    return f"{value:.2f}" if value else ""


def _slices_cell(row):
    """Scheme I: the slice count ("auto:S" when planned); scheme II: "m=M" for M moduli
    ("auto:m=M" when planned)."""
    if row["kind"] not in ("ozaki", "plan"):
        return "-"
    requested_moduli = row.get("moduli_requested")  # .get: rows of older JSON files
    if row.get("plan_backend") == "crt" or requested_moduli is not None:
        if row.get("moduli") is None:
            return "auto" if requested_moduli is None else f"m={requested_moduli}"
        if requested_moduli is None:
            return f"auto:m={row['moduli']}"
        return f"m={row['moduli']}"
    if row.get("slices") is None:
        return "auto" if row["slices_requested"] is None else str(row["slices_requested"])
    if row["slices_requested"] is None:
        return f"auto:{row['slices']}"
    return str(row["slices"])


def _fast_cell(row):
    return "-" if row["fast"] is None else ("yes" if row["fast"] else "no")


def _backend_cell(row):
    """The row's backend, "auto>crt" when its plan runs another one (.get: older JSON files)."""
    backend, ran = row.get("backend"), row.get("plan_backend")
    if not backend:
        return "-"
    return f"{backend}>{ran}" if ran and ran != backend else backend


def _timing_cell(key, formatter):
    return lambda row: formatter(row.get(key)) if row["status"] == "ok" else row["status"]


#: (header, cell of a row, right-aligned)
COLUMNS = [
    ("n", lambda row: row["shape"], True),
    ("method", lambda row: row["method"] + (" (default)" if row["default"] else ""), False),
    ("backend", _backend_cell, False),
    ("slices", _slices_cell, True),
    ("fast", _fast_cell, False),
    ("GEMMs", lambda row: str(row["gemms"]) if row.get("gemms") else "-", True),
    ("time ms", _timing_cell("time_ms", _time), True),
    ("TFLOPS", _timing_cell("tflops", _number), True),
    ("x native", lambda row: f"{row['speedup']:.2f}x" if row.get("speedup") else "", True),
    ("floor ms", lambda row: _time(row.get("floor_ms")), True),
    ("of floor", lambda row: f"{row['of_floor']:.0%}" if row.get("of_floor") else "", True),
    ("x default", lambda row: _ratio_cell(row.get("vs_default") or row.get("share_of_default")), True),
    ("median rel err", lambda row: _error(row.get("median_rel_err")), True),
    ("max rel err", lambda row: _error(row.get("max_rel_err")), True),
    ("max comp err", lambda row: _error(row.get("max_comp_err")), True),
    ("RN share", lambda row: (f"{row['rounded_share']:.1%}" if row.get("rounded_share") is not None
                              else ""), True),
]


def _cells(rows):
    return [[cell(row) for _, cell, _ in COLUMNS] for row in rows]


def format_table(rows):
    """Aligned plain-text table of the rows."""
    headers = [header for header, _, _ in COLUMNS]
    body = _cells(rows)
    widths = [max(len(line[i]) for line in [headers] + body) for i in range(len(COLUMNS))]

    def line(cells):
        return "  ".join(cell.rjust(w) if right else cell.ljust(w)
                         for cell, w, (_, _, right) in zip(cells, widths, COLUMNS)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule] + [line(cells) for cells in body])


def describe_run(meta):
    """One line: device, date, versions and inputs."""
    # runs from before --dtype have no meta["dtypes"]: they measured both
    copies = " (float32 copies for sgemm)" if "float32" in meta.get("dtypes", DTYPES) else ""
    return (f"{meta['device_name']} ({meta['device']}), {meta['date']}, torch "
            f"{meta['torch_version']}, CUDA {meta['cuda_version'] or 'none'}, ozaki "
            f"{meta['ozaki_version']}{' @ ' + meta['git_commit'] if meta['git_commit'] else ''}; "
            f"inputs phi_matrix(phi={meta['phi']}, seed={meta['seed']}), float64{copies}; "
            f"median of {meta['repeats']} runs{_large_repeats(meta)} after {meta['warmup']} "
            "warm-up")


def _large_repeats(meta):
    """' (N from 16384^3)' where the run measured products that large with fewer repeats."""
    large = [s for s in meta.get("shapes", []) if math.prod(s) >= LARGE_PRODUCT]
    if meta.get("shapes") is not None and (not large or meta["large_repeats"] == meta["repeats"]):
        return ""
    return f" ({meta['large_repeats']} from 16384^3)"


def notes(meta):
    int8_floor = meta.get("int8_floor_gemm")  # .get: runs from before the INT8 backends
    units = (f"Floor units: FP16 {meta['floor_gemm']}" + (f"; INT8 {int8_floor}" if int8_floor
                                                          else "")
             + ". floor = GEMMs x the unit of the plan's backend (FP16 for fp16"
             + (", INT8 for int8 and crt" if int8_floor else "")
             + "); of floor = floor time / ozaki time.")
    lines = [units,
             "TFLOPS are DGEMM-equivalent (2mnk / time). x native: vs native DGEMM for dgemm "
             "rows, vs native SGEMM (TF32 off) for sgemm rows. "
             "m=M: M moduli (crt); backend X>Y: the plan of backend X runs Y.",
             f"Errors on up to {meta['samples']}x{meta['samples']} sampled entries of each "
             "product (min(samples, m) rows by min(samples, n) columns) against exact products "
             "(float32 rows: exact product of the float32 inputs); a fixed count predicted far "
             "less accurate than native (its AccuracyWarning) has accuracy_warning true in the "
             "JSON rows.",
             _reuse_note(meta)]
    if meta["device"].startswith("cpu"):
        lines.append("On the CPU no tensor cores run: the floor units and ozaki's products are "
                     "CPU code whose speeds do not relate as on a GPU, so of floor is no bound "
                     "there (it may pass 100%).")
    if meta["floor_gemm"] == FLOOR_FP16_OUT:
        lines.insert(0, "NOTE: the floor was measured with an FP16-OUTPUT GEMM "
                        "(torch.mm out_dtype=float32 is not supported on this device/torch).")
    return lines


def _reuse_note(meta):
    """What served the timed ozaki calls after the first: --fresh, or the layers that keep parts
    of repeated operands and replay repeated calls."""
    if meta.get("fresh"):
        return ("Every ozaki call ran as a first call (--fresh: no kept parts of A, no replayed "
                "graphs, no plan guessed from earlier calls).")
    if "fresh" not in meta:  # runs from before --fresh: what they measured is not recorded
        return "Reuse between timed calls not recorded (a run from before --fresh)."
    return ("The timed calls repeat on the same operands, as a loop would: from the second call "
            "on, a left operand of at least 2^23 entries is served by its kept parts "
            "(ozaki.repeated) and, on CUDA, default calls of up to 2^33 multiply-adds by replayed "
            "graphs (ozaki/replay.py); --fresh times first calls.")


def format_markdown(rows, meta):
    """The table as markdown, with a header line giving device, date and versions."""
    headers = [header for header, _, _ in COLUMNS]
    align = ["---:" if right else ":---" for _, _, right in COLUMNS]
    table = ["| " + " | ".join(cells) + " |" for cells in [headers, align] + _cells(rows)]
    return "\n".join([f"**{describe_run(meta)}**", ""] + [f"{note}  " for note in notes(meta)]
                     + [""] + table) + "\n"


def _json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # strict JSON has no nan / inf
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    return value


def write_json(path, meta, rows):
    """meta and rows as strict JSON (non-finite floats as strings), for the benchmark scripts too."""
    with open(path, "w") as handle:
        json.dump(_json_safe({"meta": meta, "rows": rows}), handle, indent=1)
        handle.write("\n")


def write_outputs(args, rows, meta, markdown=None):
    """--json and --markdown (markdown(rows, meta) gives the table; this bench's by default)."""
    if args.json:
        write_json(args.json, meta, rows)
    if args.markdown:
        with open(args.markdown, "w") as handle:
            handle.write((markdown or format_markdown)(rows, meta))


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------


def _git_commit():
    """The checkout's commit; OZAKI_GIT_COMMIT names it where the tree travelled without .git."""
    if os.environ.get("OZAKI_GIT_COMMIT"):
        return os.environ["OZAKI_GIT_COMMIT"]
    try:
        result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=5,
                                cwd=os.path.dirname(os.path.abspath(__file__)))
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0:
        return None
    return result.stdout.strip() or None


def run_metadata(args, argv, floor_kind):
    return {"device": str(args.device), "device_name": device_name(args.device),
            "torch_version": torch.__version__, "cuda_version": torch.version.cuda,
            "ozaki_version": ozaki.__version__, "git_commit": _git_commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "phi": args.phi, "seed": args.seed, "samples": args.samples,
            "repeats": args.repeats, "large_repeats": min(args.repeats, args.large_repeats),
            "warmup": args.warmup, "shapes": [list(s) for s in args.shapes],
            "dtypes": args.dtypes, "modes": args.modes, "backends": args.backends,
            "floor_gemm": floor_kind,
            "int8_floor_gemm": (FLOOR_INT8 if any(backend in INT8_BACKENDS
                                                  for backend in args.backends) else None),
            "fresh": args.fresh, "argv": list(argv), "complete": False}


def repeats_for(shape, args):
    m, k, n = shape
    return min(args.repeats, args.large_repeats) if m * k * n >= LARGE_PRODUCT else args.repeats


def prepare_shape(shape, args, floor_kind, progress=None):
    """Inputs (and their float32 copies if float32 is among args.dtypes), sampled entries and the
    exact references of args.dtypes for one shape. The time they took is written on the stream of
    `progress` (None: nowhere)."""
    begin = time.perf_counter()
    A, B, rows, cols = make_inputs(shape, args.phi, args.seed, args.samples, args.device)
    operands = {DTYPES[name]: (A.to(DTYPES[name]), B.to(DTYPES[name])) for name in args.dtypes}
    synchronize(args.device)
    made = time.perf_counter()
    sample = Sample.on(rows, cols, args.device)
    references = {dtype: ExactReference.build(*pair, sample) for dtype, pair in operands.items()}
    if progress is not None:
        progress.write(f"{shape_label(shape)}: inputs {made - begin:.1f} s, exact references "
                       f"{time.perf_counter() - made:.1f} s")
    return ShapeRun(shape, args.device, args.warmup, repeats_for(shape, args), floor_kind,
                    operands, sample, references)


def _plan_summary(row):
    """`crt: auto:m=15, 15 INT8 GEMMs` or `fp16: auto:6 slices, fast, 21 FP16 GEMMs`."""
    ran = row["plan_backend"]
    kind = "FP16" if ran == "fp16" else "INT8"
    if ran == "crt":
        return f"crt: {_slices_cell(row)}, {row['gemms']} {kind} GEMMs"
    mode = "fast" if row["fast"] else "all pairs"
    return f"{ran}: {_slices_cell(row)} slices, {mode}, {row['gemms']} {kind} GEMMs"


def progress_message(spec, row):
    """What the progress bar says after a row:
    `n=4096 ozaki dgemm default (auto) ... 11.2 ms [crt: auto:m=15, 15 INT8 GEMMs] ...`."""
    shape = row["shape"]
    where = f"n={shape}" if "x" not in shape else f"m x k x n = {shape}"
    name = f"{where} {spec.label()}" + (f" ({spec.backend})" if spec.backend else "")
    if row["status"] != "ok":
        return f"{name} ... {row['status']}" + (f" ({row['note']})" if row.get("note") else "")
    line = f"{name} ... {_time(row['time_ms'])} ms"
    if spec.default:
        line += f" [{_plan_summary(row)}]"
    if "max_rel_err" in row:
        line += f" (max rel err {_error(row['max_rel_err'])})"
    if "share_of_default" in row:
        line += f" ({row['share_of_default']:.1%} of the default {ROUTINES[spec.dtype]} row)"
    return line


def run_shape(shape, args, floor_kind, specs, on_row, progress):
    """Measure every spec on one shape; on_row(spec, row) after each. The shape's tensors are
    released when this returns."""
    run = prepare_shape(shape, args, floor_kind, progress)
    for spec in specs:
        on_row(spec, measure_row(spec, run))


@contextmanager
def _reuse(enabled):
    """What later calls take from earlier ones on (as configured) or off: ozaki.repeated's kept
    parts, the replay of repeated calls, and the plans guessed from the last products
    (ozaki.speculation)."""
    saved = repeated.ENABLED, replay.ENABLED, speculation.DEVICES
    if not enabled:
        repeated.ENABLED = replay.ENABLED = False
        speculation.DEVICES = ()
    try:
        yield
    finally:
        repeated.ENABLED, replay.ENABLED, speculation.DEVICES = saved


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.device.type == "cuda":
        torch.cuda.set_device(args.device)
    floor_kind = floor_gemm_kind(args.device)
    meta = run_metadata(args, argv, floor_kind)
    specs = row_specs(dtypes=args.dtypes, modes=args.modes, backends=args.backends,
                      slices=args.slices, sgemm_slices=args.sgemm_slices,
                      all_pairs_slices=args.all_pairs_slices, moduli=args.moduli,
                      sgemm_moduli=args.sgemm_moduli)
    rows = []
    print(describe_run(meta), flush=True)
    progress = Progress(len(specs) * len(args.shapes), "bench", enabled=not args.quiet)

    def on_row(spec, row):
        rows.append(row)
        progress.step(progress_message(spec, row))
        write_outputs(args, rows, meta)

    with _reuse(not args.fresh):
        for shape in args.shapes:
            run_shape(shape, args, floor_kind, specs, on_row, progress)
            free_memory(args.device)
    progress.close()
    meta["complete"] = True
    write_outputs(args, rows, meta)
    print()
    print(format_table(rows))
    print()
    print("\n".join(notes(meta)), flush=True)
    if args.plot:
        from ozaki import plots
        for dtype, path in per_dtype_paths(args.plot, args.dtypes).items():
            plots.save(plots.plot_throughput(meta, rows, dtype), path)
            print(f"figure written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
