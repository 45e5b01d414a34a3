"""Host cost of one ozaki product: per-call wall time and the torch ops it dispatches (profiler
events, nested ones included), for products whose host work (Python, op dispatch, device-to-host
reads) sets the pace on a GPU.

    PYTHONPATH=src python3 scripts/probes/host_overhead.py [--calls 100] [--profile NAME] [--ops NAME]
        [--device cuda] [--cg-size 1500]

On the GPU (--device cuda) a call's wall time is the host's where the host sets the pace (each
timed batch ends with a synchronize), and --profile shows where the host's Python goes.
"""

import argparse
import cProfile
import math
import pstats
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

import ozaki

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from programs_bench import kernel_matrix  # noqa: E402


def _square(n, device):
    g = torch.Generator().manual_seed(n)
    return (torch.randn(n, n, generator=g, dtype=torch.float64).to(device),
            torch.randn(n, n, generator=g, dtype=torch.float64).to(device))


def cases(device, cg_size):
    """(name, call): the calls whose host cost is measured."""
    a64, b64 = _square(64, device)
    a256, b256 = _square(256, device)
    a1024, b1024 = _square(1024, device)
    K = kernel_matrix(cg_size, 1.0, 0.01, 0, device)
    P = torch.randn(cg_size, 16, generator=torch.Generator().manual_seed(1),
                    dtype=torch.float64).to(device)
    prepared = ozaki.prepare(K)  # kept alive by the closure; the other cases use a copy of K
    K_plain = K.clone()
    mode = ozaki.enable()

    def dropin():
        with mode:
            return K_plain @ P

    return [
        ("dgemm 64^3", lambda: ozaki.dgemm(a64, b64)),
        ("dgemm 256^3", lambda: ozaki.dgemm(a256, b256)),
        ("dgemm 1024^3", lambda: ozaki.dgemm(a1024, b1024)),
        ("dgemm 64^3 moduli=15", lambda: ozaki.dgemm(a64, b64, moduli=15)),
        ("dgemm 256^3 moduli=15", lambda: ozaki.dgemm(a256, b256, moduli=15)),
        ("K @ P plain", lambda: ozaki.dgemm(K_plain, P)),
        ("K @ P prepared", lambda: (prepared, ozaki.dgemm(K, P))[1]),
        ("K @ P enable()", dropin),
    ]


#: Cases whose CPU kernels take most of a call: timed over fewer calls.
SLOW = ("K @ P", "dgemm 1024")


def _synchronize():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def per_call_ms(call, calls, repeats=5):
    """The best of `repeats` averages over `calls` calls (the least disturbed by other work)."""
    for _ in range(3):
        call()
    best = math.inf
    for _ in range(repeats):
        _synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        _synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e3)
    return best


def ops_per_call(call, detail=False):
    """Top-level aten/ozaki ops one call dispatches (nested ones, e.g. inside ozaki::gemm's
    Python kernel, counted too: every dispatch costs)."""
    call()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        call()
    events = [e for e in prof.key_averages() if "::" in e.key]
    if detail:
        for e in sorted(events, key=lambda e: -e.count):
            print(f"    {e.count:4d} {e.key}")
    return sum(e.count for e in events)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--profile", help="cProfile the case whose name contains this")
    parser.add_argument("--ops", help="list the ops of the case whose name contains this")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (the host's cost of GPU calls)")
    parser.add_argument("--cg-size", type=int, default=1500, help="order of the kernel matrix K")
    parser.add_argument("--no-replay", action="store_true", help="ozaki.replay off: eager calls")
    args = parser.parse_args()
    if args.no_replay:
        ozaki.replay.ENABLED = False
    torch.set_num_threads(1)
    print(f"{'call':24s} {'ms/call':>8s} {'ops':>5s}")
    for name, call in cases(args.device, args.cg_size):
        if args.profile and args.profile in name:
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(args.calls):
                call()
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
            continue
        if args.ops and args.ops in name:
            ops_per_call(call, detail=True)
            continue
        slow = name.startswith(SLOW) and args.device == "cpu"
        calls = max(1, args.calls // 50) if slow else args.calls
        ms, ops = per_call_ms(call, calls), ops_per_call(call)
        print(f"{name:24s} {ms:8.3f} {ops:5d}")


if __name__ == "__main__":
    main()
