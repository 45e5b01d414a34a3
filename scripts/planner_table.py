"""Print the slice plans ozaki picks for phi-matrices, as a markdown table (docs/accuracy.md).

Usage: python scripts/planner_table.py [--dtype float64|float32] [--size 64] [--seed 0]
                                       [--phis 0.1 0.5 ...] [--ks 16 17 ...]

For each phi and k, A = phi_matrix(size, k, phi) and B = phi_matrix(k, size, phi) are drawn on
the CPU from one seeded generator, and the table shows ozaki.plan(A, B, backend="fp16") (the
automatic FP16 scheme-I plan), the full split, and the same with rounding="nearest"; with
--backends K ..., the plan of every backend and of rounding="nearest" for those k instead
(docs/accuracy.md, "Default plans"). Progress goes to stderr.
"""

import argparse
import sys

import torch

import ozaki
from ozaki import accuracy
from ozaki.cli import (check_operand_memory, check_phi, inner_dimension, phi_value, positive_int,
                       seed_value)

PHIS = (0.1, 0.5, 1.0, 2.0, 4.0)
KS = (16, 17, 64, 65, 256, 257, 1024, 1025, 4096, 4097, 16384)
DTYPES = {"float64": torch.float64, "float32": torch.float32}


def mode(plan):
    return "fast" if plan.fast else "all pairs"


def row(phi, k, auto, nearest):
    full = auto.full_split_slices
    return (f"| {phi:g} | {k} | {auto.beta} | {auto.slices} {mode(auto)}, {auto.gemms} GEMMs, "
            f"{auto.reason} | {full} ({full * full} GEMMs) | "
            f"{nearest.slices} {mode(nearest)}, {nearest.gemms} GEMMs |")


def scheme_one_cell(plan, with_reason=True):
    text = f"{plan.slices} {mode(plan)}, {plan.gemms} GEMMs"
    return f"{text}, {plan.reason}" if with_reason else text


def backends_row(phi, k, plans):
    """docs/accuracy.md, "Default plans": the default, backend="crt", "int8", "fp16" and
    rounding="nearest" plans of one draw."""
    auto, crt, int8, fp16, nearest = plans
    def named(plan):
        if plan.backend == "crt":
            return f"crt {plan.moduli} moduli ({plan.reason})"
        return f"{plan.backend} {scheme_one_cell(plan, False)} ({plan.reason})"
    crt_cell = (f"{crt.moduli}, {crt.reason}" if crt.backend == "crt" else named(crt))
    nearest_cell = (f"crt {nearest.moduli} moduli" if nearest.backend == "crt"
                    else f"{nearest.backend} {scheme_one_cell(nearest, False)}")
    return (f"| {phi:g} | {k} | {named(auto)} | {crt_cell} | {scheme_one_cell(int8)} | "
            f"{scheme_one_cell(fp16, False)} | {nearest_cell} |")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phis", type=phi_value, nargs="+", default=PHIS)
    parser.add_argument("--ks", type=inner_dimension, nargs="+", default=KS)
    parser.add_argument("--size", type=positive_int, default=64, help="m = n (default 64)")
    parser.add_argument("--seed", type=seed_value, default=0)
    parser.add_argument("--dtype", choices=DTYPES, default="float64")
    parser.add_argument("--backends", type=inner_dimension, nargs="*", metavar="K",
                        help="print docs/accuracy.md's table of every backend's plan instead, "
                             "for these k (all --ks are drawn, so the draws stay the same)")
    args = parser.parse_args(argv)
    shapes = [(args.size, k, args.size) for k in args.ks]
    check_operand_memory(parser, "--size", shapes, [torch.device("cpu")])
    check_phi(parser, args.phis, shapes, args.seed, [DTYPES[args.dtype]], option="--phis")
    missing = [k for k in args.backends or [] if k not in args.ks]
    if missing:
        parser.error(f"argument --backends: k = {missing[0]} is not among --ks "
                     f"({' '.join(map(str, args.ks))}), whose draws the table shows")
    return args


def main(argv=None):
    args = parse_args(argv)
    dtype = DTYPES[args.dtype]
    if args.backends is not None:
        print_backends_table(args, dtype)
        return

    print("| phi | k | beta | planned (slices, mode, GEMMs, reason) | full split (all pairs) "
          "| nearest plan |")
    print("|---|---|---|---|---|---|")
    for phi, k, A, B in draws(args, dtype):
        print(row(phi, k, ozaki.plan(A, B, backend="fp16"),
                  ozaki.plan(A, B, backend="fp16", rounding="nearest")), flush=True)


def draws(args, dtype, only=None):
    """(phi, k, A, B) for every phi and k, from one seeded generator (k in `only` when given; the
    others are drawn all the same, so the draws do not depend on it)."""
    generator = torch.Generator().manual_seed(args.seed)
    for phi in args.phis:
        for k in args.ks:
            A = accuracy.phi_matrix(args.size, k, phi, generator=generator, dtype=dtype)
            B = accuracy.phi_matrix(k, args.size, phi, generator=generator, dtype=dtype)
            if only and k not in only:
                continue
            print(f"phi = {phi:g}, k = {k}", file=sys.stderr, flush=True)
            yield phi, k, A, B


def print_backends_table(args, dtype):
    print("| phi | k | `ozaki.plan(A, B)` (reason) | `backend=\"crt\"`: moduli, reason | "
          "`backend=\"int8\"` | `backend=\"fp16\"` | `rounding=\"nearest\"` |")
    print("|---|---|---|---|---|---|---|")
    for phi, k, A, B in draws(args, dtype, args.backends):
        plans = [ozaki.plan(A, B, **options) for options in
                 ({}, {"backend": "crt"}, {"backend": "int8"}, {"backend": "fp16"},
                  {"rounding": "nearest"})]
        print(backends_row(phi, k, plans), flush=True)


if __name__ == "__main__":
    main()
