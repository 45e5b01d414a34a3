"""Batched products on the GPU: ozaki.matmul on (batch, n, n) @ (batch, n, n) as one batched call,
against native torch.matmul (batched cuBLAS DGEMM/ZGEMM) and against a Python loop of ozaki.dgemm
over the batch with the batch's plan. phi = 0.5 inputs (never zeros), median of --reps timed runs
after a warm-up, CUDA events. Writes batched.json and prints a markdown table.

    python scripts/batched_bench.py --out DIR [--reps 5]
"""
import argparse
import datetime
import json
import os
import statistics
import sys

import torch

import ozaki
from ozaki import accuracy
from ozaki.bench import time_call
from ozaki.cli import check_output_path, positive_int
from ozaki.progress import Progress

CASES = [  # (dtype, batch, n)
    (torch.float64, 4096, 32), (torch.float64, 1024, 64), (torch.float64, 256, 128),
    (torch.float64, 64, 256), (torch.float64, 16, 512), (torch.float64, 4, 1024),
    (torch.float64, 8, 2048), (torch.complex128, 64, 256), (torch.complex128, 8, 1024),
]


def time_ms(fn, reps):
    """Median milliseconds of reps calls after one warm-up (CUDA events, ozaki.bench's timer)."""
    times, _ = time_call(fn, torch.device("cuda"), warmup=1, repeats=reps)
    return statistics.median(times)


def operands(dtype, batch, n, seed):
    g = torch.Generator().manual_seed(seed)
    parts = 2 if dtype.is_complex else 1
    real = [accuracy.phi_matrix(batch * n, n, 0.5, generator=g).reshape(batch, n, n)
            for _ in range(2 * parts)]
    if dtype.is_complex:
        return torch.complex(real[0], real[1]).cuda(), torch.complex(real[2], real[3]).cuda()
    return real[0].cuda(), real[1].cuda()


def loop_options(plan):
    if plan.backend == "crt":
        return dict(backend="crt", moduli=plan.moduli)
    return dict(backend=plan.backend, slices=plan.slices, fast=plan.fast)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="directory for batched.json")
    parser.add_argument("--reps", type=positive_int, default=5,
                        help="timed runs per case and column (median)")
    args = parser.parse_args(argv)
    check_output_path(parser, "--out", os.path.join(args.out, "batched.json"))
    if not torch.cuda.is_available():
        sys.exit("batched_bench.py needs a CUDA device")
    rows = []
    progress = Progress(len(CASES), "batched")
    for index, (dtype, batch, n) in enumerate(CASES):
        A, B = operands(dtype, batch, n, seed=index)
        flops = (8 if dtype.is_complex else 2) * batch * n ** 3
        native = time_ms(lambda: torch.matmul(A, B), args.reps)
        batched = time_ms(lambda: ozaki.matmul(A, B), args.reps)
        row = dict(dtype=str(dtype).replace("torch.", ""), batch=batch, n=n, native_ms=native,
                   ozaki_ms=batched, native_tflops=flops / native / 1e9,
                   ozaki_tflops=flops / batched / 1e9)
        if not dtype.is_complex:
            plan = ozaki.plan(A, B)
            options = loop_options(plan)
            looped = time_ms(lambda: [ozaki.dgemm(A[e], B[e], **options) for e in range(batch)],
                             args.reps)
            same = all(torch.equal(ozaki.matmul(A, B)[e], ozaki.dgemm(A[e], B[e], **options))
                       for e in range(0, batch, max(1, batch // 8)))
            row.update(loop_ms=looped, plan=str(plan), plan_backend=plan.backend,
                       loop_bits_equal=same)
        rows.append(row)
        progress.step(f"{row['dtype']} {batch} x {n}^3: native {native:.2f} ms, ozaki {batched:.2f} ms")
    progress.close()
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                date=datetime.date.today().isoformat(), phi=0.5, reps=args.reps)
    with open(os.path.join(args.out, "batched.json"), "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)
    print(f"{meta['device']}, torch {meta['torch']}, {meta['date']}, phi = 0.5, median of {args.reps}")
    print("| dtype | batch x n^3 | native ms (TFLOPS) | ozaki.matmul ms (TFLOPS) | x native | "
          "loop of dgemm ms | batched vs loop | bits = loop |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        loop = (f"{r['loop_ms']:.2f} | {r['loop_ms'] / r['ozaki_ms']:.1f}x | {r['loop_bits_equal']}"
                if "loop_ms" in r else "- | - | -")
        print(f"| {r['dtype']} | {r['batch']} x {r['n']}^3 | {r['native_ms']:.2f} "
              f"({r['native_tflops']:.1f}) | {r['ozaki_ms']:.2f} ({r['ozaki_tflops']:.1f}) | "
              f"{r['native_ms'] / r['ozaki_ms']:.2f} | {loop} |")


if __name__ == "__main__":
    main()
