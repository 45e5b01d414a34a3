"""The reduced path's wave plan against its memory plan (csrc/tile_waves.h, OZAKI_TILE_WAVES):
for each shape, rounds of native DGEMM, ozaki.dgemm with a fixed moduli count under the memory
plan (OZAKI_TILE_WAVES=0) and under the wave plan (1), in turn within each round so that the
card's clock drifts alike for both (the calls as a program makes them, A kept by
ozaki.repeated as far as its budget allows; ozaki.replay off); the median time of each, its ratio to native, the
peak memory beyond A and B (the result included), and whether both plans gave the same bits.

    python scripts/probes/tile_waves.py [--shapes 16384,16384,16384 ...] [--moduli 15]
        [--rounds 5] [--check-rows]

Where the plans disagree (or with --check-rows), sampled rows of each are checked against the
CPU's and the entries where they differ are located.
"""

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from crt_paths import phi_operands, shape_value  # noqa: E402

import ozaki  # noqa: E402

PLANS = {"memory plan": "0", "wave plan": "1"}


def synchronized(call):
    """(seconds, result) of one call from a synchronized device to its result."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    result = call()
    torch.cuda.synchronize()
    return time.perf_counter() - start, result


def peak_beyond(call):
    """Peak bytes allocated during one call beyond what was allocated before it."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = call()
    torch.cuda.synchronize()
    del result
    return torch.cuda.max_memory_allocated() - base


def where_they_differ(x, y):
    """The entries whose bits differ, as a count and the rows' and columns' ranges."""
    differ = x.view(torch.int64) != y.view(torch.int64)
    count = int(differ.sum())
    if count == 0:
        return "none"
    rows = differ.any(dim=1).nonzero().flatten()
    cols = differ.any(dim=0).nonzero().flatten()
    return (f"{count} entries in rows {int(rows[0])}..{int(rows[-1])} ({rows.numel()} rows), "
            f"columns {int(cols[0])}..{int(cols[-1])} ({cols.numel()} columns)")


def check_against_cpu(A, B, results, moduli):
    """Sampled rows of each plan's result against the CPU's (with a fixed moduli count an entry
    depends on its row of A and column of B alone), and where the two plans differ."""
    m = A.shape[0]
    rows = sorted({0, 1, 127, 128, 255, 256, m // 2 - 1, m // 2, m - 129, m - 128, m - 1} &
                  set(range(m)))
    expected = ozaki.dgemm(A[rows].cpu(), B.cpu(), backend="crt", moduli=moduli)
    for name in PLANS:
        print(f"  {name} against the CPU's rows {rows}: "
              f"{where_they_differ(results[name][rows].cpu(), expected)}", flush=True)
    print(f"  the plans differ at: {where_they_differ(results['memory plan'], results['wave plan'])}",
          flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", type=shape_value, nargs="+",
                        default=[shape_value("16384,16384,16384")])
    parser.add_argument("--moduli", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--check-rows", action="store_true",
                        help="check sampled rows of both plans against the CPU's even when they agree")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    print("#", torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    for m, k, n in args.shapes:
        A, B = phi_operands(m, k, n)
        ozaki.repeated.clear()
        ozaki.replay.ENABLED = False  # a replayed graph would keep the plan it was captured with
        calls = {"native": lambda: A @ B}
        for name, value in PLANS.items():
            def call(value=value):
                os.environ["OZAKI_TILE_WAVES"] = value
                return ozaki.dgemm(A, B, backend="crt", moduli=args.moduli)
            calls[name] = call
        results = {name: call() for name, call in calls.items()}  # warm-up
        first = {name: results[name] for name in PLANS}
        times = {name: [] for name in calls}
        for r in range(args.rounds):
            for name, call in calls.items():
                seconds, results[name] = synchronized(call)
                times[name].append(seconds)
            print(f"  round {r + 1}/{args.rounds}: " + ", ".join(
                f"{name} {1e3 * times[name][-1]:.2f} ms" for name in calls), flush=True)
        same = torch.equal(results["memory plan"], results["wave plan"])
        for name in PLANS:
            if not torch.equal(first[name], results[name]):
                print(f"  {name}: its first and last calls differ at "
                      f"{where_they_differ(first[name], results[name])}", flush=True)
                same = False
        del first
        if not same or args.check_rows:
            check_against_cpu(A, B, results, args.moduli)
        del results
        peaks = {name: peak_beyond(calls[name]) for name in PLANS}
        native = statistics.median(times["native"])
        print(f"== {m}x{k}x{n} moduli={args.moduli}: native {1e3 * native:.2f} ms; " + "; ".join(
            f"{name} {1e3 * statistics.median(times[name]):.2f} ms "
            f"({native / statistics.median(times[name]):.3f}x, peak {peaks[name] / 2**30:.2f} GiB)"
            for name in PLANS) + f"; same bits: {same}", flush=True)
        del A, B
        os.environ.pop("OZAKI_TILE_WAVES", None)
        if not same:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
