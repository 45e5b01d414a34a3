"""Command line of the studies: `python -m ozaki.study accuracy|reproducibility [options]`."""

import argparse
import csv
import datetime
import sys

import torch

from ozaki import _ops
from ozaki.cli import (DTYPES, MAX_FP16_INNER, HelpFormatter, check_distinct_outputs,
                       check_operand_memory, check_output_path, check_phi, check_plot_path,
                       device_name, inner_dimension, moduli_count, per_dtype_paths, phi_value,
                       positive_int, resolve_device, seed_value, slice_count)
from ozaki.crt import MAX_INNER as CRT_MAX_INNER
from ozaki.crt import MAX_MODULI
from ozaki.progress import Progress
from ozaki.slicing import MAX_SLICES

from . import errors, reproducibility


def _modes_by_backend():
    return "; ".join(f"{backend}: {' '.join(modes)}"
                     for backend, modes in errors.BACKEND_MODES.items())


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m ozaki.study",
        description="Accuracy and reproducibility studies of ozaki's products.",
        formatter_class=HelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.commands = commands.choices  # {command: its parser}, for the errors of parse_args

    study = commands.add_parser(
        "accuracy", formatter_class=HelpFormatter,
        help="error against exact references vs backend, slices, mode, phi and k, next to native "
             "matmul",
        description="Error of ozaki.dgemm / ozaki.sgemm against the exact product (every entry "
                    "of a size x size product), versus backend, slice or moduli count, mode, phi "
                    "and k, next to torch's native float64/float32 matmul (TF32 off) on the same "
                    "inputs. Inputs: ozaki.accuracy.phi_matrix, drawn afresh for each (dtype, phi, "
                    "k) from --seed.")
    study.add_argument("--dtype", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    study.add_argument("--phi", nargs="+", type=phi_value, default=[0.1, 0.5, 1.0, 2.0, 4.0],
                       help="exponent spreads of the inputs (rand - 0.5) * exp(phi * randn)")
    study.add_argument("--k", nargs="+", type=inner_dimension, default=[64, 1024, 4096],
                       help="inner dimensions")
    study.add_argument("--size", type=positive_int, default=24,
                       help="m = n: rows of A and columns of B (every entry is checked)")
    study.add_argument("--backends", nargs="+", choices=list(errors.BACKENDS), default=["fp16"],
                       help="the backend= of every ozaki call; each runs the modes of --modes it "
                            f"has ({_modes_by_backend()})")
    study.add_argument("--modes", nargs="+", choices=list(errors.MODES), default=None,
                       help="fast / all-pairs: every count of --slices; moduli: every count of "
                            "--moduli; auto: the automatic plan of the backend; nearest: "
                            "rounding='nearest'. Native matmul is always measured (default: "
                            "every mode of each backend)")
    study.add_argument("--slices", nargs="+", type=slice_count, metavar="S",
                       help="slice counts of the fast and all-pairs modes (default: 1..14 for "
                            f"float64, 1..7 for float32; at most {MAX_SLICES})")
    study.add_argument("--moduli", nargs="+", type=moduli_count, metavar="N",
                       help="moduli counts of the moduli mode, backend crt (default: 12..16 for "
                            f"float64, 6..10 for float32; at most {MAX_MODULI})")
    study.add_argument("--reference", choices=["int", "mpmath"], default="int",
                       help="exact reference: Python integers, or mpmath at exact precision")
    study.add_argument("--device", default=None,
                       help="cpu, cuda or cuda:I (default: cuda if available, else cpu)")
    study.add_argument("--seed", type=seed_value, default=0)
    study.add_argument("--csv", metavar="PATH", help="write every row as CSV")
    study.add_argument("--plot", metavar="PATH",
                       help="draw the error against the slice count with ozaki.plots: PATH (.png, "
                            ".pdf, .svg) for one --dtype, PATH-float64 / PATH-float32 for both; "
                            "needs matplotlib and the fast mode of backend fp16 or int8")
    study.add_argument("--quiet", action="store_true", help="no progress bar")

    repro = commands.add_parser(
        "reproducibility", formatter_class=HelpFormatter,
        help="bitwise comparison across CPU thread counts, CUDA devices and streams",
        description="Compute dgemm/sgemm products in several modes under each CPU thread count "
                    "and on each CUDA device (default and a side stream), --repeats times each, "
                    "and compare the bits of every result with the first setting's first run. "
                    "Prints a one-line verdict; exits with 1 when any bit differs.")
    repro.add_argument("--shape", nargs=3, type=positive_int, action="append",
                       metavar=("M", "K", "N"),
                       help="a product (m x k) times (k x n); repeat for several (default: "
                            + ", ".join("x".join(map(str, s)) for s in reproducibility.DEFAULT_SHAPES)
                            + ")")
    repro.add_argument("--threads", nargs="+", type=positive_int, default=None,
                       help="CPU thread counts (default: 1, 2 and torch.get_num_threads())")
    repro.add_argument("--devices", nargs="+", default=None,
                       help="cpu, cuda, cuda:I (default: cpu, and every visible CUDA device when "
                            "ozaki has its CUDA backend)")
    repro.add_argument("--backends", nargs="+", choices=list(reproducibility.BACKENDS),
                       default=list(reproducibility.DEFAULT_BACKENDS),
                       help="the backend= of the products; each adds its own products")
    repro.add_argument("--phi", type=phi_value, default=1.0)
    repro.add_argument("--seed", type=seed_value, default=0)
    repro.add_argument("--repeats", type=positive_int, default=2, help="runs per setting")
    repro.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def parse_args(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    parser = parser.commands[args.command]  # the command's parser: its usage in the errors
    if args.command == "accuracy":
        args.device = resolve_device(parser, args.device)
        # a value given twice is one case: once each, in the order given
        args.dtype, args.phi, args.k = (list(dict.fromkeys(values))
                                        for values in (args.dtype, args.phi, args.k))
        check_output_path(parser, "--csv", args.csv)
        check_backends_and_modes(parser, args)
        if args.csv is not None and args.plot is not None:
            check_distinct_outputs(parser, [
                ("--csv", "the table", args.csv, [args.csv]),
                ("--plot", "a figure", args.plot, per_dtype_paths(args.plot, args.dtype).values())])
        check_plot_path(parser, "--plot", args.plot)  # after the arguments: it needs matplotlib
        shapes = [(args.size, k, args.size) for k in args.k]
        check_operand_memory(parser, "--size", shapes, [args.device])
        check_phi(parser, args.phi, shapes, args.seed, [DTYPES[name] for name in args.dtype])
    else:
        args.backends = list(dict.fromkeys(args.backends))
        args.shapes = [tuple(s) for s in args.shape or reproducibility.DEFAULT_SHAPES]
        for m, k, n in args.shapes:
            if k > MAX_FP16_INNER:
                parser.error(f"argument --shape: k = {k} exceeds 2^22, the limit of exact FP16 "
                             "slice products")
            problem = errors.moduli_problem(reproducibility.MODULI_COUNTS, k)
            if problem and "crt" in args.backends:
                parser.error(f"argument --shape: {problem}; leave crt out of --backends")
        args.threads = list(dict.fromkeys(args.threads or [1, 2, torch.get_num_threads()]))
        args.devices = default_devices() if args.devices is None else [
            resolve_device(parser, text, "--devices") for text in dict.fromkeys(args.devices)]
        settings = reproducibility.settings_for(args.devices, args.threads)
        if len(settings) * args.repeats < 2:
            parser.error(f"argument --repeats: {args.repeats} run of one setting "
                         f"({settings[0].label()}) compares nothing; give --repeats 2 or "
                         "more, or more --threads or --devices")
        check_operand_memory(parser, "--shape", args.shapes, args.devices)
        check_phi(parser, [args.phi], args.shapes, args.seed,
                  {dtype for _, dtype, _ in reproducibility.products(args.backends)})
    return args


def check_backends_and_modes(parser, args):
    """--backends, --modes, --slices, --moduli and --plot of the accuracy study fit together: every
    named mode runs with some backend, every backend runs some mode, counts are given only to the
    modes that take them, and backend crt can run its counts at every k."""
    args.backends = list(dict.fromkeys(args.backends))
    if args.modes is None:
        args.modes = list(errors.MODES)
    else:
        args.modes = list(dict.fromkeys(args.modes))
        for mode in args.modes:
            if not any(mode in errors.BACKEND_MODES[b] for b in args.backends):
                runs = [b for b, modes in errors.BACKEND_MODES.items() if mode in modes]
                parser.error(f"argument --modes: {mode} runs with backend {' or '.join(runs)}, "
                             f"not with --backends {' '.join(args.backends)}")
        for backend in args.backends:
            if not any(mode in errors.BACKEND_MODES[backend] for mode in args.modes):
                parser.error(f"argument --modes: backend {backend} runs none of "
                             f"{' '.join(args.modes)} (it runs "
                             f"{' '.join(errors.BACKEND_MODES[backend])})")
    if args.slices is not None and not any(mode in ("fast", "all-pairs")
                                           and mode in errors.BACKEND_MODES[backend]
                                           for mode in args.modes for backend in args.backends):
        parser.error("argument --slices: the fast and all-pairs modes take it (backend fp16 or "
                     "int8); add one of them to --modes and --backends")
    if args.moduli is not None and "crt" not in args.backends:
        parser.error("argument --moduli: the moduli mode runs with backend crt; add crt to "
                     "--backends")
    if args.moduli is not None and "moduli" not in args.modes:
        parser.error("argument --moduli: add moduli to --modes")
    if "crt" in args.backends and ("moduli" in args.modes or "auto" in args.modes):
        # the default counts run at every k up to the limit
        counts = args.moduli if args.moduli and "moduli" in args.modes else []
        for k in args.k:
            problem = errors.moduli_problem(counts, k)
            if problem:
                option = "--k" if k > CRT_MAX_INNER else "--moduli"
                parser.error(f"argument {option}: {problem}")
    if args.plot:
        if "fast" not in args.modes:
            parser.error("argument --plot: the figure shows fast mode; add fast to --modes")
        if not {"fp16", "int8"} & set(args.backends):
            parser.error("argument --plot: the figure shows fast mode, which runs with backend "
                         "fp16 or int8; add one to --backends")


def default_devices():
    devices = [torch.device("cpu")]
    if torch.cuda.is_available() and _ops.cuda_backend_built():
        devices += [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return devices


def format_table(rows):
    """Aligned text table of a list of dicts with the same keys."""
    headers = list(rows[0])
    body = [[str(row[h]) for h in headers] for row in rows]
    widths = [max(len(line[i]) for line in [headers] + body) for i in range(len(headers))]
    lines = [headers, ["-" * w for w in widths]] + body
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip()
                     for line in lines)


def write_csv(path, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=errors.CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def run_accuracy(args):
    cases = errors.cases_for([DTYPES[name] for name in args.dtype], args.phi, args.k, args.size)
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    print(f"accuracy study on {device_name(args.device)} ({args.device}), {date}, torch "
          f"{torch.__version__}: {len(cases)} cases of {args.size} x k x {args.size}, backends "
          f"{' '.join(args.backends)}, exact reference: {args.reference}", flush=True)
    progress = Progress(len(cases), "accuracy", enabled=not args.quiet)
    rows = errors.error_study(cases, args.modes, args.slices, args.seed, args.device,
                              args.reference, progress, args.backends, args.moduli)
    progress.close()
    if args.csv:
        write_csv(args.csv, rows)
        print(f"{len(rows)} rows written to {args.csv}")
    print(format_table(errors.summarize(rows)))
    print("max comp err = max |C - AB| / (|A||B|) over all entries; RN share = entries equal to "
          "the correctly rounded exact product")
    if args.plot:
        from ozaki import plots
        for dtype, path in per_dtype_paths(args.plot, args.dtype).items():
            plots.save(plots.plot_error_vs_slices(rows, dtype), path)
            print(f"figure written to {path}")
    return 0


def run_reproducibility(args):
    print(f"reproducibility check on {reproducibility.describe_devices(args.devices)}", flush=True)
    steps = len(args.shapes) * len(reproducibility.products(args.backends))
    progress = Progress(steps, "reproducibility", enabled=not args.quiet)
    report = reproducibility.check(args.shapes, args.devices, args.threads, args.seed, args.phi,
                                   args.repeats, progress, args.backends)
    progress.close()
    print(report.verdict())
    return 0 if report.reproducible else 1


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    return run_accuracy(args) if args.command == "accuracy" else run_reproducibility(args)


if __name__ == "__main__":
    sys.exit(main())
