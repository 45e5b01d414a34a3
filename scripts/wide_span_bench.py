"""What rows of wide span cost, on the GPU (docs/benchmarks.md, "Rows of wide span").

    python scripts/wide_span_bench.py [--out DIR] [--repeats N] [--sizes N ...] [--device cpu]
                                      [--parts wide fixed]

For each wide-span case of tests/test_wide_spans.py, at sizes up to 4096: native, the default
call (ozaki.dgemm / sgemm) and rounding="nearest", their times and the plan the default took,
with the max componentwise error of a sampled grid of entries against exact products. Then,
on phi = 0.5 inputs, what a fixed count's accuracy check (ozaki/fixed_counts.py) costs: the
fixed-count call with the check and with it bypassed, in the same process. Prints a table and
writes wide_spans.json under --out.
"""
import argparse
import json
import os
import statistics

import torch

import ozaki
from ozaki import accuracy, product
from ozaki.bench import time_call
from ozaki.cli import (check_operand_memory, check_output_path, device_name, positive_int,
                       resolve_device)

DEVICE = torch.device("cuda")  # --device, resolved (cuda:I names a GPU too)
GEMMS = {torch.float64: ozaki.dgemm, torch.float32: ozaki.sgemm}


def rescaled_units(n, decades, dtype, g):
    """(A D, D^-1 B): A, B standard normal, D = diag(logspace(-decades, decades, n)), drawn on
    the generator's device."""
    A = torch.randn(n, n, generator=g, dtype=torch.float64, device=g.device)
    B = torch.randn(n, n, generator=g, dtype=torch.float64, device=g.device)
    D = torch.logspace(-decades, decades, n, dtype=torch.float64, device=g.device)
    return (A * D).to(dtype), (B / D[:, None]).to(dtype)


def powers_of_two(n, g):
    A = torch.randn(n, n, generator=g, dtype=torch.float64)
    B = torch.randn(n, n, generator=g, dtype=torch.float64)
    exponents = torch.randint(-90, 91, (n,), generator=g).double()
    return A * torch.exp2(exponents), B * torch.exp2(-exponents)[:, None]


def taylor_rows(m, k, n, g):
    x = torch.logspace(-3, 3, m, dtype=torch.float64)
    powers = torch.arange(k, dtype=torch.float64)
    V = x[:, None] ** powers[None, :]
    return V, torch.randn(k, n, generator=g, dtype=torch.float64) * 1e-3 ** powers[:, None]


def huge_meets_tiny(n, g):
    A = torch.randn(n, n, generator=g, dtype=torch.float64)
    B = torch.randn(n, n, generator=g, dtype=torch.float64)
    A[:, 17] *= 2.0 ** 70
    B[17, :] *= 2.0 ** -70
    return A, B


def wide_cases(g, large):
    yield "1e20 beside 1e-20, 1x2x1", (torch.tensor([[1e20, 1e-20]], dtype=torch.float64),
                                       torch.tensor([[1e-20], [1e20]], dtype=torch.float64))
    sizes = (64, 1024, 4096) if large else (64,)
    for n in sizes:
        yield f"units rescaled by 1e20, {n}^3", rescaled_units(n, 20, torch.float64, g)
    for n in sizes[1:] or sizes:
        yield f"units in powers of two 2^-90..2^90, {n}^3", powers_of_two(n, g)
        yield f"huge meets tiny, {n}^3", huge_meets_tiny(n, g)
        yield f"Taylor rows, {n}x30x{n}", taylor_rows(n, 30, n, g)
    n = sizes[-1]
    yield f"float32 units rescaled by 1e12, {n}^3", rescaled_units(n, 12, torch.float32, g)


def sampled_error(C, A, B, samples=16):
    rows = torch.linspace(0, A.shape[0] - 1, min(samples, A.shape[0])).long()
    cols = torch.linspace(0, B.shape[1] - 1, min(samples, B.shape[1])).long()
    a, b = A[rows].cpu(), B[:, cols].cpu()
    exact = accuracy.exact_matmul(a, b)
    return accuracy.componentwise_error(C[rows][:, cols].cpu(), exact, a, b)


def median_ms(fn, repeats):
    times, result = time_call(fn, DEVICE, 1, repeats)
    return statistics.median(times), result


def wide_rows(repeats, g, large):
    rows = []
    for name, (A, B) in wide_cases(g, large):
        A, B = A.to(DEVICE), B.to(DEVICE)
        gemm = GEMMS[A.dtype]
        native_ms, native = median_ms(lambda: A @ B, repeats)
        default_ms, C = median_ms(lambda: gemm(A, B), repeats)
        nearest_ms, _ = median_ms(lambda: gemm(A, B, rounding="nearest"), repeats)
        plan = ozaki.plan(A, B)
        row = {"case": name, "native_ms": native_ms, "default_ms": default_ms,
               "nearest_ms": nearest_ms, "x_native": native_ms / default_ms,
               "plan": str(plan), "backend": plan.backend, "gemms": plan.gemms,
               "plan_rounding": plan.rounding, "error": sampled_error(C, A, B),
               "native_error": sampled_error(native, A, B)}
        rows.append(row)
        print(f"{name:42s} native {native_ms:9.3f} ms  default {default_ms:10.3f} ms "
              f"({row['x_native']:.3f}x)  nearest {nearest_ms:10.3f} ms  "
              f"{plan.backend} {plan.gemms} GEMMs{' nearest' if plan.rounding else ''}  "
              f"error {row['error']:.1e} (native {row['native_error']:.1e})", flush=True)
    return rows


def fixed_count_rows(repeats, g, sizes):
    """The fixed-count call with its check and bypassed, phi = 0.5, in the same process."""
    checked = product.fixed_count_check
    rows = []
    for n in sizes:
        for dtype, count in ((torch.float64, 15), (torch.float32, 7)):
            A = accuracy.phi_matrix(n, n, 0.5, generator=g, dtype=dtype).to(DEVICE)
            B = accuracy.phi_matrix(n, n, 0.5, generator=g, dtype=dtype).to(DEVICE)
            gemm = GEMMS[dtype]
            times = {}
            for label, check in (("checked", checked), ("bypassed", lambda *_: None)):
                product.fixed_count_check = check
                times[label], _ = median_ms(lambda: gemm(A, B, moduli=count), repeats)
            product.fixed_count_check = checked
            default_ms, _ = median_ms(lambda: gemm(A, B), repeats)
            row = {"n": n, "dtype": str(dtype), "moduli": count, "checked_ms": times["checked"],
                   "bypassed_ms": times["bypassed"], "default_ms": default_ms}
            rows.append(row)
            print(f"phi 0.5 {n}^3 {str(dtype):14s} moduli={count}: checked {times['checked']:.3f} "
                  f"ms, check bypassed {times['bypassed']:.3f} ms "
                  f"({times['checked'] / times['bypassed'] - 1:+.2%}); default {default_ms:.3f} ms",
                  flush=True)
            del A, B
            if DEVICE.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="folder of wide_spans.json (made if missing)")
    parser.add_argument("--repeats", type=positive_int, default=5)
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=[4096, 8192, 16384],
                        help="sizes of the phi = 0.5 fixed-count comparison")
    parser.add_argument("--device", default="cuda", help="cpu, cuda or cuda:I")
    parser.add_argument("--parts", nargs="+", choices=("wide", "fixed"), default=("wide", "fixed"),
                        help="wide: the wide-span cases; fixed: the fixed-count check's cost")
    args = parser.parse_args(argv)
    args.device = resolve_device(parser, args.device)
    if "fixed" in args.parts:
        check_operand_memory(parser, "--sizes", [(n, n, n) for n in args.sizes], [args.device])
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.error(f"argument --out: {args.out!r} is a file, expected a folder")
    try:  # made now, so that an --out that cannot be written fails before the measurements
        os.makedirs(args.out, exist_ok=True)
    except OSError as error:
        parser.error(f"argument --out: cannot make the folder {args.out!r} ({error.strerror})")
    args.json = os.path.join(args.out, "wide_spans.json")
    check_output_path(parser, "--out", args.json)
    return args


def main(argv=None):
    args = parse_args(argv)
    global DEVICE
    DEVICE = args.device
    g = torch.Generator().manual_seed(0)
    name = device_name(DEVICE)
    print(name, "torch", torch.__version__, flush=True)
    large = DEVICE.type == "cuda"  # the cases past 64^3 are for a GPU
    result = {"device": name, "torch": torch.__version__,
              "wide": wide_rows(args.repeats, g, large) if "wide" in args.parts else [],
              "fixed_counts": (fixed_count_rows(args.repeats, g, args.sizes)
                               if "fixed" in args.parts else [])}
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
