"""Print the slice plans ozaki picks for phi-matrices, as a markdown table (docs/accuracy.md).

Usage: python scripts/planner_table.py [--dtype float64|float32] [--size 64] [--seed 0]
                                       [--phis 0.1 0.5 ...] [--ks 16 17 ...]

For each phi and k, A = phi_matrix(size, k, phi) and B = phi_matrix(k, size, phi) are drawn on
the CPU from one seeded generator, and the table shows ozaki.plan(A, B, backend="fp16") (the
automatic FP16 scheme-I plan), the full split, and the same with rounding="nearest". Progress
goes to stderr.
"""

import argparse
import sys

import torch

import ozaki
from ozaki import accuracy

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phis", type=float, nargs="+", default=PHIS)
    parser.add_argument("--ks", type=int, nargs="+", default=KS)
    parser.add_argument("--size", type=int, default=64, help="m = n (default 64)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=DTYPES, default="float64")
    args = parser.parse_args()
    dtype = DTYPES[args.dtype]

    print("| phi | k | beta | planned (slices, mode, GEMMs, reason) | full split (all pairs) "
          "| nearest plan |")
    print("|---|---|---|---|---|---|")
    generator = torch.Generator().manual_seed(args.seed)
    for phi in args.phis:
        for k in args.ks:
            print(f"phi = {phi:g}, k = {k}", file=sys.stderr, flush=True)
            A = accuracy.phi_matrix(args.size, k, phi, generator=generator, dtype=dtype)
            B = accuracy.phi_matrix(k, args.size, phi, generator=generator, dtype=dtype)
            print(row(phi, k, ozaki.plan(A, B, backend="fp16"),
                      ozaki.plan(A, B, backend="fp16", rounding="nearest")), flush=True)


if __name__ == "__main__":
    main()
