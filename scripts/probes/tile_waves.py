"""The reduced path's wave plan against its memory plan (csrc/tile_waves.h, OZAKI_TILE_WAVES):
for each shape, rounds of native DGEMM, ozaki.dgemm with a fixed moduli count under the memory
plan (OZAKI_TILE_WAVES=0) and under the wave plan (1), in turn within each round so that the
card's clock drifts alike for both (the calls as a program makes them, A kept by
ozaki.repeated as far as its budget allows; ozaki.replay off); the median time of each, its ratio to native, the
peak memory beyond A and B (the result included), and whether both plans gave the same bits.

    python scripts/probes/tile_waves.py [--shapes 16384,16384,16384 ...] [--moduli 15]
        [--rounds 5]
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", type=shape_value, nargs="+",
                        default=[shape_value("16384,16384,16384")])
    parser.add_argument("--moduli", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=5)
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
        times = {name: [] for name in calls}
        for r in range(args.rounds):
            for name, call in calls.items():
                seconds, results[name] = synchronized(call)
                times[name].append(seconds)
            print(f"  round {r + 1}/{args.rounds}: " + ", ".join(
                f"{name} {1e3 * times[name][-1]:.2f} ms" for name in calls), flush=True)
        same = torch.equal(results["memory plan"], results["wave plan"])
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
