"""How much of a synchronized call is the GPU's own work: for each shape, native DGEMM and
ozaki.dgemm (the default plan, with fixed moduli, and with A prepared), each timed two ways:

- "call": host clock around the call and a synchronize, as crt_paths.py and users time it;
- "gpu": the same call queued behind torch.cuda._sleep, so that every launch the host makes before
  its first wait is issued while the GPU still sleeps; CUDA events around the call then measure
  the GPU's work without the host's pace (a wait inside the call, such as the plan's read, still
  lets the host fall behind after it).

call - gpu is the time the GPU waits for the host: before the first kernel and between kernels.

    python scripts/probes/host_share.py [--shapes 1024,1024,1024 ...] [--repeats 9]
"""

import argparse
import statistics
import time

import torch

import ozaki
from crt_paths import phi_operands, shape_value  # this folder is the script's own
from plan_reads import median_ms

DEFAULT_SHAPES = ["1024,1024,1024", "2048,2048,2048", "4096,4096,4096", "16384,1024,16384"]


def sleep_cycles_for(ms):
    """torch.cuda._sleep cycles that keep the GPU busy for about ms milliseconds."""
    probe = 10_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    torch.cuda._sleep(probe)
    end.record()
    end.synchronize()
    return int(probe * ms / start.elapsed_time(end))


def gpu_ms(call, repeats, cycles):
    """(median ms between events around the call queued behind a sleep, median host ms of the
    call): the GPU's own work where the host issued everything during the sleep."""
    gpu, host = [], []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        torch.cuda._sleep(cycles)
        start.record()
        t0 = time.perf_counter()
        call()
        host.append((time.perf_counter() - t0) * 1e3)
        end.record()
        end.synchronize()
        gpu.append(start.elapsed_time(end))
    return statistics.median(gpu), statistics.median(host)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", type=shape_value, nargs="+",
                        default=[shape_value(s) for s in DEFAULT_SHAPES])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--sleep-ms", type=float, default=3.0,
                        help="GPU sleep ahead of each call (longer than the call's host time)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    cycles = sleep_cycles_for(args.sleep_ms)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, phi 0.5, median of "
          f"{args.repeats}; sleep {args.sleep_ms} ms ahead of each 'gpu' call")
    print("| m | k | n | what | call ms | gpu ms | call - gpu ms | host ms (behind sleep) |")
    print("|---|---|---|---|---|---|---|---|")
    for m, k, n in args.shapes:
        A, B = phi_operands(m, k, n)
        handles = []
        calls = [("native", lambda: A @ B),
                 ("moduli=15", lambda: ozaki.dgemm(A, B, moduli=15)),
                 ("default", lambda: ozaki.dgemm(A, B)),
                 ("default, replay off", lambda: ozaki.dgemm(A, B)),
                 ("default, A prepared", lambda: ozaki.dgemm(A, B))]
        for label, call in calls:
            ozaki.replay.ENABLED = label != "default, replay off"
            if label.endswith("prepared"):
                handles.append(ozaki.prepare(A))
            for _ in range(3):
                call()
            wall = median_ms(call, args.repeats)
            gpu, host = gpu_ms(call, args.repeats, cycles)
            flag = "" if host < args.sleep_ms else " (host outlasted the sleep)"
            print(f"| {m} | {k} | {n} | {label} | {wall:.3f} | {gpu:.3f} | {wall - gpu:.3f} | "
                  f"{host:.3f}{flag} |", flush=True)
        ozaki.replay.ENABLED = True
        handles.clear()
        del A, B
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
