"""Scaling of ozaki across the GPUs of one host (docs/benchmarks.md, "One product split over two GPUs").

Every rank draws the same phi = 0.5 operands on its own GPU and
  1. times ozaki.dgemm and native DGEMM (torch.matmul) of the whole product on its one GPU;
  2. times ozaki.distributed.matmul with the layouts asked for (A's rows split: "rows"; the inner
     dimension split: "inner") over all GPUs, NCCL between them,
and checks that its part of every distributed result is bitwise equal to the one-GPU result.
A time is the slowest rank's wall time of one call (barrier before, synchronize after); the
figure is the median over the repeats.

    python scripts/distributed_bench.py --gpus 2 --sizes 16384x16384x16384,32768x32768x16384 --out DIR
"""

import argparse
import json
import os
import socket
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def parse_size(text):
    m, k, n = (int(x) for x in text.lower().split("x"))
    return m, k, n


def operands(m, k, n, device, seed):
    """phi = 0.5 entries (rand - 0.5) * exp(0.5 randn), drawn on the GPU from one seed: the same
    on every rank."""
    g = torch.Generator(device=device).manual_seed(seed)

    def draw(rows, cols):
        x = torch.rand((rows, cols), generator=g, dtype=torch.float64, device=device) - 0.5
        return x.mul_(torch.randn((rows, cols), generator=g, dtype=torch.float64,
                                  device=device).mul_(0.5).exp_())

    return draw(m, k), draw(k, n)


def timed(fn, repeats, warmup=1):
    """(median seconds of the slowest rank, last result)."""
    result = None
    for _ in range(warmup):
        result = None
        result = fn()
    times = []
    for _ in range(repeats):
        result = None
        torch.cuda.synchronize()
        dist.barrier()
        start = time.perf_counter()
        result = fn()
        torch.cuda.synchronize()
        elapsed = torch.tensor([time.perf_counter() - start], device="cuda")
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        times.append(elapsed.item())
    return statistics.median(times), result


def same_bits(x, y):
    return torch.equal(x.contiguous().view(torch.int64), y.contiguous().view(torch.int64))


def worker(rank, world, port, args):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    device = torch.device(f"cuda:{rank}")
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device,
                            timeout=timedelta(seconds=600))
    import ozaki
    import ozaki.distributed

    rows = []
    for size in args.sizes.split(","):
        m, k, n = parse_size(size)
        A, B = operands(m, k, n, device, seed=20261122)
        flops = 2.0 * m * k * n
        native_s, C_native = timed(lambda: A @ B, args.repeats)
        del C_native
        one_s, C_one = timed(lambda: ozaki.dgemm(A, B), args.repeats)
        plan = str(ozaki.plan(A, B))
        record = dict(m=m, k=k, n=n, gpus=world, plan=plan, native_1gpu_ms=native_s * 1e3,
                      ozaki_1gpu_ms=one_s * 1e3, ozaki_1gpu_tflops=flops / one_s / 1e12)
        for layout in args.layouts.split(","):
            if layout == "rows":
                part = torch.tensor_split(torch.arange(m), world)[rank]
                a, b = A[part[0]:part[-1] + 1], B
                want = C_one[part[0]:part[-1] + 1]
            else:
                part = torch.tensor_split(torch.arange(k), world)[rank]
                a, b = A[:, part[0]:part[-1] + 1], B[part[0]:part[-1] + 1]
                want = C_one
            elapsed, C = timed(lambda: ozaki.distributed.matmul(a, b, layout), args.repeats)
            identical = torch.tensor([1 if same_bits(C, want) else 0], device=device)
            dist.all_reduce(identical, op=dist.ReduceOp.MIN)
            del C, a, b
            record[f"{layout}_ms"] = elapsed * 1e3
            record[f"{layout}_speedup"] = one_s / elapsed
            record[f"{layout}_bit_identical"] = bool(identical.item())
        if rank == 0:
            print(json.dumps(record), flush=True)
        rows.append(record)
        del A, B, C_one
        torch.cuda.empty_cache()
    if rank == 0 and args.out:
        os.makedirs(args.out, exist_ok=True)
        meta = dict(device=torch.cuda.get_device_name(), gpus=world, torch=torch.__version__,
                    date=time.strftime("%Y-%m-%d"), repeats=args.repeats)
        with open(os.path.join(args.out, "distributed.json"), "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)
    dist.destroy_process_group()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=torch.cuda.device_count())
    parser.add_argument("--sizes", default="16384x16384x16384,32768x32768x16384,32768x16384x32768",
                        help="m x k x n products, comma-separated")
    parser.add_argument("--layouts", default="rows,inner")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.gpus < 1 or args.gpus > torch.cuda.device_count():
        sys.exit(f"--gpus must be between 1 and the {torch.cuda.device_count()} GPUs present, "
                 f"got {args.gpus}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(worker, args=(args.gpus, port, args), nprocs=args.gpus, join=True,
                       start_method="spawn")


if __name__ == "__main__":
    main()
