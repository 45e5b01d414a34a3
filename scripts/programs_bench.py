"""Two float64 programs written for torch, not for ozaki, run natively and under
`with ozaki.enable():` on the same inputs in the same process; feeds docs/benchmarks.md, "Real
programs under ozaki.enable".

    python scripts/programs_bench.py [--json PATH] [--markdown PATH]
    python scripts/programs_bench.py --device cpu --cg-size 300 --ns-size 256 --rhs 8

- cg: per-column conjugate gradients on --rhs right-hand sides at once, with a Gaussian-process
  kernel matrix over --cg-size points in R^3: one K @ P product per iteration, the rest
  element-wise (native); sanity figure max_j |b_j - K x_j| / |b_j|.
- newton-schulz: X <- X (2I - A X) for A = I + 0.1 randn / sqrt(n), two products per iteration;
  sanity figure |I - A X|_F.

Four modes: native; under ozaki.enable() with nothing kept between products ("unkept":
ozaki.repeated off); under ozaki.enable() as it comes (the repeated left operand kept from its
second product on, ozaki/repeated.py; nothing kept at the start of a run); and under
ozaki.enable() with the fixed left operand (K, A) prepared by ozaki.prepare at the start of each
run (its cost included).

Fixed iteration counts, so every mode does the same work. Per case: the median time of --repeats
runs after one warm-up per mode, the ratios to native, whether the unkept and prepared runs gave
the ozaki run's bits, the sanity figures (with correctly rounded products, so that neither mode's
rounding favours its own result) and the relative difference of the native and ozaki results.
"""
import argparse
import datetime
import math
import statistics
import sys
import time

import torch

import ozaki
from ozaki.cli import (SEED_LIMIT, HelpFormatter, check_output_path, device_name,
                       positive_int, resolve_device, seed_value)
from ozaki.bench import write_outputs
from ozaki.progress import Progress

PROGRAMS = ("cg", "newton-schulz")


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python scripts/programs_bench.py",
        description="Time a block conjugate-gradient solve on a Gaussian-process kernel matrix "
                    "and a Newton-Schulz inverse iteration, float64, natively and under "
                    "ozaki.enable() (docs/benchmarks.md, 'Real programs under ozaki.enable').",
        formatter_class=HelpFormatter)
    parser.add_argument("--device", default=None,
                        help="cpu, cuda or cuda:I (default: cuda if available, else cpu)")
    parser.add_argument("--programs", nargs="+", choices=PROGRAMS, default=list(PROGRAMS),
                        metavar="PROGRAM", help=f"programs to run, of {', '.join(PROGRAMS)}")
    parser.add_argument("--cg-size", type=positive_int, default=6000, metavar="N",
                        help="points of the kernel matrix (K is N x N)")
    parser.add_argument("--rhs", type=positive_int, nargs="+", default=[8, 16, 32], metavar="R",
                        help="right-hand-side counts, one case each")
    parser.add_argument("--cg-iterations", type=positive_int, default=50,
                        help="conjugate-gradient iterations (one K @ P product each)")
    parser.add_argument("--length-scale", type=positive_float, default=1.0,
                        help="length scale l of the kernel")
    parser.add_argument("--noise", type=positive_float, default=1e-2,
                        help="noise added to K's diagonal (bounds its smallest eigenvalue)")
    parser.add_argument("--ns-size", type=positive_int, default=4096, metavar="N",
                        help="order of the Newton-Schulz matrix A")
    parser.add_argument("--ns-iterations", type=positive_int, default=12,
                        help="Newton-Schulz iterations (two products each)")
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="timed runs per case and mode (the median is reported)")
    parser.add_argument("--seed", type=seed_value, default=0, help="seed of the inputs")
    parser.add_argument("--json", metavar="PATH", help="write the rows and metadata as JSON")
    parser.add_argument("--markdown", metavar="PATH", help="write the table as markdown")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--no-replay", action="store_true",
                        help="run every product eagerly (ozaki.replay off), for comparison")
    return parser


def parse_args(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    args.device = resolve_device(parser, args.device)
    args.programs = [name for name in PROGRAMS if name in args.programs]
    args.rhs = list(dict.fromkeys(args.rhs))
    for r in args.rhs:
        if r > args.cg_size:
            parser.error(f"argument --rhs: {r} right-hand sides exceed --cg-size {args.cg_size}")
    if "newton-schulz" in args.programs and args.ns_size < 2:
        parser.error(f"argument --ns-size: must be at least 2, got {args.ns_size}")
    check_output_path(parser, "--json", args.json)
    check_output_path(parser, "--markdown", args.markdown)
    if args.no_replay:
        ozaki.replay.ENABLED = False
    return args


# ---------------------------------------------------------------------------
# The programs (plain torch: nothing in them knows about ozaki)
# ---------------------------------------------------------------------------


def kernel_matrix(n, length_scale, noise, seed, device):
    """K = exp(-|x_i - x_j|^2 / (2 l^2)) + noise I for n points x uniform in the cube
    [0, n^(1/3)]^3 (one point per unit volume, so K's spectrum and CG's convergence hardly depend
    on n), drawn on the CPU so that every device gets the same points."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, 3, generator=g, dtype=torch.float64) * n ** (1 / 3)).to(device)
    squared = torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist").square_()
    K = torch.exp(squared.div_(-2 * length_scale ** 2))
    K.diagonal().add_(noise)
    return K


def right_hand_sides(n, r, seed, device):
    g = torch.Generator().manual_seed((seed + 1) % SEED_LIMIT)  # another draw than K's points
    return torch.randn(n, r, generator=g, dtype=torch.float64).to(device)


def conjugate_gradients(K, B, iterations):
    """X with K X ~ B: plain CG on each column of B at once, starting from X = 0."""
    X = torch.zeros_like(B)
    R = B.clone()
    P = R.clone()
    rs = (R * R).sum(dim=0)
    for _ in range(iterations):
        KP = K @ P
        pkp = (P * KP).sum(dim=0)
        alpha = torch.where(pkp > 0, rs / pkp, torch.zeros_like(rs))
        X += alpha * P
        R -= alpha * KP
        rs_next = (R * R).sum(dim=0)
        beta = torch.where(rs > 0, rs_next / rs, torch.zeros_like(rs))
        P = R + beta * P
        rs = rs_next
    return X


def newton_schulz_matrix(n, seed, device):
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(n, n, generator=g, dtype=torch.float64)
    return (torch.eye(n, dtype=torch.float64) + 0.1 / math.sqrt(n) * noise).to(device)


def newton_schulz(A, iterations):
    """X ~ A^-1 by X <- X (2I - A X) from X_0 = A^T / (|A|_1 |A|_inf)."""
    norms = torch.linalg.matrix_norm(A, ord=1) * torch.linalg.matrix_norm(A, ord=math.inf)
    X = A.T / norms
    two = 2 * torch.eye(A.shape[0], dtype=A.dtype, device=A.device)
    for _ in range(iterations):
        X = X @ (two - A @ X)
    return X


# ---------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


MODES = ("native", "unkept", "ozaki", "prepared")


def timed(run, device, repeats, mode, fixed=None):
    """Median milliseconds of `repeats` runs after one untimed one, and the last run's result.
    mode: native, unkept (under ozaki.enable, ozaki.repeated off), ozaki (under ozaki.enable,
    nothing kept at the start of the run) or prepared (under ozaki.enable, with the program's
    fixed left operand prepared at the start of each run: ozaki.prepare's cost is timed too)."""
    def call():
        if mode == "unkept":
            ozaki.repeated.ENABLED = False
            try:
                with ozaki.enable():
                    return run()
            finally:
                ozaki.repeated.ENABLED = True
        if mode == "ozaki":
            ozaki.repeated.clear()
            with ozaki.enable():
                return run()
        if mode == "prepared":
            with ozaki.enable(), ozaki.prepare(fixed):
                return run()
        return run()

    result = call()
    times = []
    for _ in range(repeats):
        result = None
        synchronize(device)
        start = time.perf_counter()
        result = call()
        synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), result


def relative_difference(X, reference):
    return float(torch.linalg.norm(X - reference) / torch.linalg.norm(reference))


def short_plan(plan):
    counts = plan.moduli if plan.backend == "crt" else plan.slices
    return f"{plan.backend} {counts}" if counts else plan.backend


def measure(program, label, inputs, run, sanity, products, args):
    """One row: every mode timed on the same inputs, the sanity figures (rounded_product), and
    whether the unkept and prepared runs gave the ozaki run's bits. inputs[0] is the fixed left
    operand."""
    native_ms, native = timed(run, args.device, args.repeats, "native")
    unkept_ms, unkept = timed(run, args.device, args.repeats, "unkept")
    ozaki_ms, under = timed(run, args.device, args.repeats, "ozaki")
    prepared_ms, prepared = timed(run, args.device, args.repeats, "prepared", fixed=inputs[0])
    plan = ozaki.plan(*inputs)
    return dict(program=program, case=label, products=products, native_ms=native_ms,
                unkept_ms=unkept_ms, unkept_ratio=unkept_ms / native_ms,
                unkept_same_bits=bool(torch.equal(unkept, under)),
                ozaki_ms=ozaki_ms, ratio=ozaki_ms / native_ms, prepared_ms=prepared_ms,
                prepared_ratio=prepared_ms / native_ms,
                prepared_same_bits=bool(torch.equal(prepared, under)),
                native_sanity=sanity(native),
                ozaki_sanity=sanity(under), difference=relative_difference(under, native),
                plan=str(plan), plan_short=short_plan(plan))


def rounded_product(A, X):
    """A @ X correctly rounded (ozaki's rounding="nearest"): the sanity figures' products, so that
    native rounding errors that cancel those of the native result do not flatter it."""
    return ozaki.dgemm(A, X, rounding="nearest")


def cg_cases(args, K):
    for r in args.rhs:
        B = right_hand_sides(args.cg_size, r, args.seed, args.device)
        norms = torch.linalg.vector_norm(B, dim=0)

        def residual(X, B=B, norms=norms):
            return float((torch.linalg.vector_norm(B - rounded_product(K, X), dim=0) / norms).max())

        yield ("cg", f"n = {args.cg_size}, r = {r}, {args.cg_iterations} iterations", (K, B),
               lambda B=B: conjugate_gradients(K, B, args.cg_iterations), residual,
               args.cg_iterations)


def ns_case(args, A):
    eye = torch.eye(A.shape[0], dtype=A.dtype, device=A.device)
    return ("newton-schulz", f"n = {args.ns_size}, {args.ns_iterations} iterations", (A, A),
            lambda: newton_schulz(A, args.ns_iterations),
            lambda X: float(torch.linalg.norm(eye - rounded_product(A, X))), 2 * args.ns_iterations)


SANITY = {"cg": "max_j |b_j - K x_j| / |b_j|", "newton-schulz": "|I - A X|_F"}
COLUMNS = ("program", "case", "products", "native ms", "unkept ms", "unkept / native",
           "unkept bits = ozaki", "ozaki ms", "ozaki / native",
           "prepared ms", "prepared / native", "prepared bits = ozaki", "sanity native",
           "sanity ozaki", "rel. difference", "ozaki plan")


def format_markdown(rows, meta):
    repeats = meta["options"]["repeats"]
    lines = [f"**{meta['device']}, torch {meta['torch']}, ozaki {meta['ozaki']}, {meta['date']}; "
             f"median of {repeats} run{'s' if repeats > 1 else ''} after one warm-up**", "",
             "Sanity: " + "; ".join(f"{name} {what}" for name, what in SANITY.items())
             + " (A X and K X correctly rounded, for both). rel. difference = |X_ozaki - X_native|_F / "
             "|X_native|_F. ozaki plan: ozaki.plan of the program's product shape.", "",
             "| " + " | ".join(COLUMNS) + " |",
             "|" + "|".join(":---" if c in ("program", "case", "ozaki plan") else "---:"
                            for c in COLUMNS) + "|"]
    for r in rows:
        cells = (r["program"], r["case"], str(r["products"]), f"{r['native_ms']:.2f}",
                 f"{r['unkept_ms']:.2f}", f"{r['unkept_ratio']:.2f}",
                 "yes" if r["unkept_same_bits"] else "**no**", f"{r['ozaki_ms']:.2f}",
                 f"{r['ratio']:.2f}", f"{r['prepared_ms']:.2f}",
                 f"{r['prepared_ratio']:.2f}", "yes" if r["prepared_same_bits"] else "**no**",
                 f"{r['native_sanity']:.3e}",
                 f"{r['ozaki_sanity']:.3e}", f"{r['difference']:.1e}", r["plan_short"])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    options = {key: value for key, value in vars(args).items()
               if key not in ("device", "json", "markdown", "quiet")}
    meta = dict(device=device_name(args.device), device_type=args.device.type,
                torch=torch.__version__, cuda=torch.version.cuda, ozaki=ozaki.__version__,
                date=datetime.date.today().isoformat(), mode=repr(ozaki.enable()),
                sanity=SANITY, options=options, complete=False)
    total = (len(args.rhs) if "cg" in args.programs else 0) + ("newton-schulz" in args.programs)
    progress = Progress(total, "programs", enabled=not args.quiet)
    rows = []

    def run_cases(cases):
        for case in cases:
            row = measure(*case, args)
            rows.append(row)
            write_outputs(args, rows, meta, format_markdown)
            progress.step(f"{row['program']} {row['case']}: native {row['native_ms']:.2f} ms, "
                          f"unkept {row['unkept_ms']:.2f} ms ({row['unkept_ratio']:.2f}x), "
                          f"ozaki {row['ozaki_ms']:.2f} ms ({row['ratio']:.2f}x), prepared "
                          f"{row['prepared_ms']:.2f} ms ({row['prepared_ratio']:.2f}x); sanity "
                          f"{row['native_sanity']:.3e} / {row['ozaki_sanity']:.3e}")

    if "cg" in args.programs:
        K = kernel_matrix(args.cg_size, args.length_scale, args.noise, args.seed, args.device)
        run_cases(cg_cases(args, K))
        del K
    if "newton-schulz" in args.programs:
        A = newton_schulz_matrix(args.ns_size, args.seed, args.device)
        run_cases([ns_case(args, A)])
        del A
    progress.close()
    meta["complete"] = True
    write_outputs(args, rows, meta, format_markdown)
    sys.stdout.write(format_markdown(rows, meta))


if __name__ == "__main__":
    main()
