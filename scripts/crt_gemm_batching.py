"""Scheme II's INT8 GEMMs as one strided-batched cuBLAS call per chunk (all moduli) against one call
per modulus (OZAKI_CRT_GEMM_LOOP=1), and per column-block width (OZAKI_INT8_BLOCK); each variant
runs in its own process, as the environment is read once. Prints ms and x native per shape.

    python scripts/crt_gemm_batching.py
"""
import os
import subprocess
import sys

CHILD = r"""
import statistics, sys, torch, ozaki
m, k, n, moduli, dtype = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
g = torch.Generator(device="cuda").manual_seed(m + k + n)
def phi_matrix(rows, cols):  # (rand - 0.5) exp(0.5 randn), drawn on the GPU
    shape = (rows, cols)
    return ((torch.rand(shape, generator=g, device="cuda", dtype=torch.float64) - 0.5)
            * torch.exp(0.5 * torch.randn(shape, generator=g, device="cuda", dtype=torch.float64)))
A, B = phi_matrix(m, k), phi_matrix(k, n)
if dtype == "float32":
    A, B = A.float(), B.float()
torch.backends.cuda.matmul.allow_tf32 = False
product = ozaki.dgemm if dtype == "float64" else ozaki.sgemm
def times(fn, repeats=5):
    fn(); torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize(); out.append(s.elapsed_time(e))
    return out
crt = times(lambda: product(A, B, backend="crt", moduli=moduli))
native = times(lambda: A @ B)
print(f"{m}x{k}x{n} {dtype} moduli={moduli} {sys.argv[6]:24s} crt {statistics.median(crt):8.2f} ms "
      f"({min(crt):.2f}-{max(crt):.2f})  native {statistics.median(native):8.2f}  "
      f"x{statistics.median(native) / statistics.median(crt):.3f}", flush=True)
"""
CASES = [(8192, 8192, 8192, 15, "float64"), (16384, 16384, 16384, 15, "float64"),
         (16384, 16384, 16384, 7, "float32"), (16384, 16384, 4096, 15, "float64")]
VARIANTS = [("loop (per modulus)", {"OZAKI_CRT_GEMM_LOOP": "1"}), ("batched", {}),
            ("batched block=8192", {"OZAKI_INT8_BLOCK": "8192"}),
            ("batched block=16384", {"OZAKI_INT8_BLOCK": "16384"})]
for case in CASES:
    for label, extra in VARIANTS:
        env = {key: value for key, value in os.environ.items()
               if key not in ("OZAKI_CRT_GEMM_LOOP", "OZAKI_INT8_BLOCK")}
        env.update(extra)
        subprocess.run([sys.executable, "-c", CHILD, *map(str, case), label], env=env, check=False)
