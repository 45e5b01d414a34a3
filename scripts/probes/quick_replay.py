"""What the quick path of replayed calls (ozaki.replay.quick_product) saves: the default dgemm
repeated on the same operands, with the quick path and with every call taking the full path
(quick_product patched out), against native DGEMM, in interleaved rounds on one GPU. Each figure is
the median over rounds of synchronized calls (crt_paths.timed: the call and its synchronize,
median of --repeats) and of loops of calls issued back to back (one synchronize per loop, divided
by the calls). --largest raises the replay's size limits (replay.MAX_MULTIPLY_ADDS to that many
multiply-adds, MAX_ENTRY_BYTES and MAX_BYTES to --entry-bytes) to see what replay would give larger
products; the row "not replayed" runs with replay off. The "fresh operands" rows cycle through
--pool copies of the operands at addresses of their own, as a program that multiplies new tensors
of one shape each call: replayed from the shape's staged entry, and not replayed.

    python scripts/probes/quick_replay.py [--shapes 1024,1024,1024 2048,2048,2048] [--rounds 7]
        [--largest 4096**3 --entry-bytes 2**31]
"""

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from crt_paths import phi_operands, shape_value, timed  # noqa: E402

import ozaki  # noqa: E402
from ozaki import replay  # noqa: E402

SHAPES = ["1024,1024,1024", "2048,2048,2048"]


def power(text):
    """An integer written as N or N**E (4096**3)."""
    base, _, exponent = text.partition("**")
    return int(base) ** int(exponent or 1)


def looped(call, repeats):
    """Seconds per call of `repeats` calls issued back to back, one synchronize at the end."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", type=shape_value,
                        default=[shape_value(s) for s in SHAPES])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--largest", type=power, default=None, help="multiply-adds replayed at most")
    parser.add_argument("--entry-bytes", type=power, default=None, help="bytes an entry may keep")
    parser.add_argument("--pool", type=int, default=8, help="copies of the operands cycled through")
    args = parser.parse_args()
    if args.largest is not None:
        replay.MAX_MULTIPLY_ADDS = args.largest
    if args.entry_bytes is not None:
        replay.MAX_ENTRY_BYTES = replay.MAX_BYTES = args.entry_bytes
    print("#", torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    quick = replay.quick_product
    full_path = lambda *_: None  # noqa: E731  (quick_product finding nothing)
    for m, k, n in args.shapes:
        A, B = phi_operands(m, k, n)
        pool = itertools.cycle([(A.clone(), B.clone()) for _ in range(args.pool)])
        calls = {"native": lambda: A @ B, "default, quick": lambda: ozaki.dgemm(A, B),
                 "default, full path": lambda: ozaki.dgemm(A, B),
                 "default, not replayed": lambda: ozaki.dgemm(A, B),
                 "default, fresh operands": lambda: ozaki.dgemm(*next(pool)),
                 "default, fresh operands, not replayed": lambda: ozaki.dgemm(*next(pool))}
        for _ in range(6):  # the guess, the capture, then replays
            expected = ozaki.dgemm(A, B)
        for _ in range(3):  # the staged entry's capture, then replays
            fresh = ozaki.dgemm(*next(pool))
        same = torch.equal(fresh.view(torch.int64), expected.view(torch.int64))
        print(f"== {m}x{k}x{n}: a fresh operands' call gives the same bits: {same}")
        figures = {name: {"synchronized": [], "looped": []} for name in calls}
        for _ in range(args.rounds):
            for name, call in calls.items():
                replay.quick_product = full_path if name.endswith("full path") else quick
                replay.ENABLED = not name.endswith("not replayed")
                figures[name]["synchronized"].append(timed(call, args.repeats)[0])
                figures[name]["looped"].append(looped(call, args.repeats))
        replay.quick_product, replay.ENABLED = quick, True
        native = statistics.median(figures["native"]["synchronized"])
        entries = [(e["a"], e["staged"], e["replays"], e["bytes"]) for e in replay.info()]
        print(f"== {m}x{k}x{n}: replayed entries (shape, staged, replays, bytes) {entries}")
        print("| call | synchronized ms | x native | looped ms per call |")
        print("|---|---|---|---|")
        for name, figure in figures.items():
            sync = statistics.median(figure["synchronized"])
            print(f"| {name} | {sync * 1e3:.4f} | {native / sync:.3f} | "
                  f"{statistics.median(figure['looped']) * 1e3:.4f} |", flush=True)
        del A, B, pool
        replay.clear()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
