"""A replayed call's result moved or copied (ozaki/replay.py, csrc/graph_result.h): for each shape,
native DGEMM, the default call replayed with its product graph pointed at a fresh result each
call ("moved", the library's), the same with the graph's own result copied out instead
("copied", replay.MOVES_RESULTS off before the capture), and the default call with replay off
("eager"), each as a synchronized call and as the GPU's own time (host_share.py's sleep ahead of
the call); the rows alternate as given by --order, and every result's bits are compared with the
first.

    python scripts/probes/replay_result.py [--shapes 1024,1024,1024 ...] [--order moved copied]
"""

import argparse
import statistics

import torch

import ozaki
from crt_paths import phi_operands, shape_value  # this folder is the script's own
from host_share import gpu_ms, sleep_cycles_for
from plan_reads import median_ms

DEFAULT_SHAPES = ["1024,1024,1024", "2048,2048,2048"]
MODES = ["native", "moved", "copied", "eager"]


def run_mode(mode, A, B, repeats, cycles):
    """(call ms, GPU ms, last result, the entry's result mode) of one mode."""
    replay = ozaki.replay
    replay.clear()
    replay.ENABLED = mode != "eager"
    moves = replay.MOVES_RESULTS
    replay.MOVES_RESULTS = moves and mode != "copied"
    try:
        call = (lambda: A @ B) if mode == "native" else (lambda: ozaki.dgemm(A, B))
        for _ in range(3):
            result = call()
        wall = median_ms(call, repeats)
        gpu, _ = gpu_ms(call, repeats, cycles)
        entries = replay.info()
        return wall, gpu, result, entries[0]["result"] if entries else "-"
    finally:
        replay.MOVES_RESULTS = moves
        replay.ENABLED = True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", type=shape_value, nargs="+",
                        default=[shape_value(s) for s in DEFAULT_SHAPES])
    parser.add_argument("--order", nargs="+", default=MODES, choices=MODES)
    parser.add_argument("--rounds", type=int, default=3, help="times the order is run")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--sleep-ms", type=float, default=3.0)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    cycles = sleep_cycles_for(args.sleep_ms)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, phi 0.5, median of "
          f"{args.repeats} per round, {args.rounds} rounds; call ms / GPU ms (sleep "
          f"{args.sleep_ms} ms ahead of each GPU call); the median over the rounds")
    print("| m | k | n | " + " | ".join(args.order) + " | default x native (moved / copied) |")
    print("|---|---|---|" + "---|" * (len(args.order) + 1))
    same = True
    for m, k, n in args.shapes:
        A, B = phi_operands(m, k, n)
        times = {mode: [] for mode in args.order}
        first = None
        for _ in range(args.rounds):
            for mode in args.order:
                wall, gpu, result, how = run_mode(mode, A, B, args.repeats, cycles)
                times[mode].append((wall, gpu))
                if mode != "native":
                    if first is None:
                        first = result
                    same &= torch.equal(result.view(torch.int64), first.view(torch.int64))
                    if mode in ("moved", "copied") and how != mode:
                        print(f"# {mode}: the entry's result was {how}")

        def median(mode, i):
            return statistics.median(t[i] for t in times[mode])

        cells = [f"{median(mode, 0):.3f} / {median(mode, 1):.3f}" for mode in args.order]
        ratios = "-"
        if {"native", "moved", "copied"} <= set(args.order):
            native = median("native", 0)
            ratios = f"{native / median('moved', 0):.2f}x / {native / median('copied', 0):.2f}x"
        print(f"| {m} | {k} | {n} | " + " | ".join(cells) + f" | {ratios} |", flush=True)
        del A, B
        torch.cuda.empty_cache()
    print(f"bits equal across the modes: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
