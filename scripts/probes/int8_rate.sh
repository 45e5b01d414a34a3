#!/usr/bin/env bash
# On a GPU machine: build scripts/probes/int8_rate.cu against the toolkit's cuBLAS (or torch's nvidia
# wheels), run it with the clocks and power sampled by nvidia-smi, and time torch._int_mm at
# 8192 and 16384 for reference. Logs go to $OUT (default ./gpu-logs): int8_rate.log, smi.csv.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./gpu-logs}
mkdir -p "$OUT"
if [ -f /usr/local/cuda/include/cublasLt.h ]; then
  INC=/usr/local/cuda/include; LIB=/usr/local/cuda/lib64
else
  NV=$(python3 -c "import nvidia, os, glob; print([p for b in nvidia.__path__ for p in glob.glob(os.path.join(b, 'cu*')) if os.path.exists(os.path.join(p, 'include', 'cublasLt.h'))][0])")
  INC=$NV/include; LIB=$NV/lib
fi
nvcc -O2 -arch=sm_90 scripts/probes/int8_rate.cu -I"$INC" -L"$LIB" -lcublas -lcublasLt -o /tmp/int8_rate || exit 1
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv -lms 250 > "$OUT/smi.csv" &
smi=$!
LD_LIBRARY_PATH=$LIB:${LD_LIBRARY_PATH:-} /tmp/int8_rate 2>&1 | tee "$OUT/int8_rate.log"
kill $smi
python3 - <<'PY' 2>&1 | tee -a "$OUT/int8_rate.log"
import torch
for n in (8192, 16384):
    a = torch.randint(-128, 128, (n, n), dtype=torch.int8, device="cuda")
    b = torch.randint(-128, 128, (n, n), dtype=torch.int8, device="cuda").t()
    for _ in range(2):
        torch._int_mm(a, b)
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); torch._int_mm(a, b); end.record(); end.synchronize()
        times.append(start.elapsed_time(end))
    ms = sorted(times)[2]
    print(f"n={n} torch._int_mm: {ms:.3f} ms {2 * n ** 3 / ms / 1e9:.0f} TOPS")
PY
