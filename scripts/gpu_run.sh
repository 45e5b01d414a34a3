#!/usr/bin/env bash
# On a GPU machine: build ozaki with its CUDA backend, run the whole test suite (CUDA cases
# included), the benchmark and the studies, and write every log under $OUT (default ./gpu-logs).
#   scripts/gpu_run.sh [all|STEP[,STEP...]] [extra arguments for python -m ozaki.bench]
# STEP: tests, fuzz, bench, study, batched, profile, wide, exact, rate, blocks, kernels, distributed, programs, calls, gaps, quick, paths, tiles, waves, ncu. OZAKI_SKIP_BUILD=1 reuses the
# build of an earlier call (to run steps in another order, or under separate time limits), from
# src/ozaki (PYTHONPATH), so that a fresh machine can run an extension built before:
# OZAKI_SAVE_BUILD=1 writes the built extension, stripped of its debug sections, to
# $OUT/ozaki_C.so (about 7.5 MB); copied here to src/ozaki/_C.cpython-312-x86_64-linux-gnu.so and
# carried, it spares the next calls the build as long as no C++ or CUDA source changes. TESTS overrides the test paths of the
# tests step (default: tests; with TEST_JOBS > 1, files and folders whose test_*.py files run TEST_JOBS
# at a time, one pytest each, their logs in $OUT/tests-files.log).
# all = tests + fuzz + bench + study + batched + profile + wide + exact. fuzz writes fuzz.log: CUDA
# against CPU bits and exact references on random cases for FUZZ_SECONDS (default 120;
# scripts/fuzz_bits.py, FUZZ_SEED its first seed), then fuzz_sequences.log: random sequences of
# calls and writes through the caching layers for SEQUENCES_SECONDS (default 60;
# scripts/fuzz_sequences.py). The study step writes study.csv (the accuracy
# study behind notebooks/accuracy.ipynb), study-backends.csv (the int8 and crt backends) and
# reproducibility.log (CPU threads vs GPU, bitwise); batched writes batched.json/log (batched
# products against native and a loop, scripts/batched_bench.py); profile writes
# profile.log/json (where the crt time goes, scripts/crt_profile.py); wide writes wide_spans.log/json
# (what rows of wide span and the fixed-count check cost, scripts/wide_span_bench.py; WIDE_SIZES
# overrides the sizes of its fixed-count comparison, WIDE_PARTS its parts); rate (not in all) measures the raw INT8 GEMM rates (scripts/probes/int8_rate.sh);
# blocks (not in all) writes int8_blocks.log, ozaki's INT8 GEMM per cuBLAS column-block width (scripts/probes/int8_blocks.py);
# kernels (not in all) writes crt_kernels.log: scheme II's element-wise passes alone against their memory floor, and
# GPU == host bits of the reconstruction (scripts/probes/crt_kernels_bench.cu, built with nvcc; needs no build of ozaki);
# exact writes exact_crt.log/json (exact scheme II against native: scripts/exact_crt_bench.py; EXACT_SIZES
# and EXACT_DRAWS override its sizes and draws);
# distributed (not in all; needs two GPUs or more) writes distributed.json/log, the scaling of
# ozaki.distributed.matmul over every GPU of the host (scripts/distributed_bench.py);
# programs (not in all) writes programs.json/md/log: a block conjugate-gradient solve and a
# Newton-Schulz inverse, native and under ozaki.enable (scripts/programs_bench.py);
# calls (not in all) writes call_kernels.log: the CUDA time of each kernel of a replayed default call
# (scripts/probes/call_kernels.py; CALLS_SHAPES overrides its shapes, as m,k,n ..., and CALLS_ARGS
# adds arguments, such as --b-rows);
# gaps (not in all) writes gpu_gaps.log: the GPU's idle stretches inside an eager default call and
# what the host did meanwhile (scripts/probes/gpu_gaps.py; GAPS_SHAPES overrides its shapes and
# GAPS_ARGS adds arguments, such as --replayed --timeline);
# quick (not in all) writes quick_replay.log: replayed default calls with and without the quick
# path, and on fresh operands of the same shape (the staged entry), against native
# (scripts/probes/quick_replay.py; QUICK_SHAPES overrides its shapes);
# paths (not in all) writes crt_paths.json/log: scheme II's CUDA paths side by side
# (scripts/probes/crt_paths.py; PATHS_SHAPES overrides its shapes, as m,k,n m,k,n ..., and
# PATHS_WHICH its paths, PATHS_TIMING its timing: synchronized or back-to-back);
# ncu (not in all) writes ncu.log: Nsight Compute's sections for the reduced GEMM and reconstruction
# kernels of one product (scripts/probes/ncu_call.py; NCU_SHAPE overrides its m k n [moduli|auto],
# NCU_KERNELS the regular expression of the kernels' names), ncu_raw.log every metric collected
# and ncu.ncu-rep the report;
# result (not in all) writes replay_result.log: replayed default calls with their result moved or
# copied, against native and eager (scripts/probes/replay_result.py; RESULT_SHAPES overrides its
# shapes);
# tiles (not in all) writes reduced_tiles.log: the reduced residue GEMM alone per tile, cluster and
# schedule (scripts/probes/reduced_tiles.sh; TILES_SHAPES overrides its shapes, as m,n,k,planes ...,
# and TILES_CONFIGS its configurations, by name);
# waves (not in all) writes tile_waves.log: the reduced path's wave plan against its memory plan
# (scripts/probes/tile_waves.py; WAVES_SHAPES overrides its shapes), with the card's SM clock and
# power sampled by nvidia-smi meanwhile and summarized at its end.
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
shift || true
OUT=${OUT:-./gpu-logs}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
status=0
# the steps to run: all, or a comma-separated list such as tests,batched
wants() { [[ $what == all || ,$what, == *,$1,* ]]; }

nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())' | tee "$OUT/versions.txt"

# CUTLASS's headers for the reduced residue GEMM: the nvidia-cutlass package where installed, else
# a copy in .cutlass/include (scripts/cutlass_headers.sh makes it, for machines without a network).
if [[ -z ${OZAKI_CUTLASS_INCLUDE:-} && -f .cutlass/include/cutlass/cutlass.h ]]; then
  export OZAKI_CUTLASS_INCLUDE=$PWD/.cutlass/include
fi

echo "== build"
start=$(date +%s)
if [[ ${OZAKI_SKIP_BUILD:-0} == 1 ]]; then
  echo "skipped (OZAKI_SKIP_BUILD=1: the build of an earlier step is used)"
  export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
elif ! OZAKI_FORCE_CUDA=1 MAX_JOBS=${MAX_JOBS:-16} python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  exit 1
fi
echo "built in $(( $(date +%s) - start )) s"
if [[ ${OZAKI_SAVE_BUILD:-0} == 1 ]]; then
  strip --strip-debug -o "$OUT/ozaki_C.so" src/ozaki/_C*.so && ls -l "$OUT/ozaki_C.so"
fi

if wants tests && [[ ${TEST_JOBS:-1} -gt 1 ]]; then
  echo "== tests, $TEST_JOBS files at a time"
  # one pytest per file, the largest files first (rc 5: every test of the file skipped at
  # collection); the files' logs end up one after the other in tests-files.log
  logs=$(mktemp -d)
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-3}
  find ${TESTS:-tests} -name 'test_*.py' -printf '%s %p\n' | sort -rn | cut -d' ' -f2 | xargs -P "$TEST_JOBS" -I{} sh -c \
    'python3 -m pytest -q -rs -p no:cacheprovider "$1" > "$2/$(basename "$1" .py).log" 2>&1
     rc=$?; [ $rc = 0 ] || [ $rc = 5 ] || echo "$1 (rc $rc)" >> "$2/failed.txt"' _ {} "$logs"
  for log in "$logs"/test_*.log; do echo "$(basename "$log" .log): $(tail -1 "$log")"; done | tee "$OUT/tests.log"
  for log in "$logs"/test_*.log; do echo "==== $(basename "$log" .log)"; cat "$log"; done > "$OUT/tests-files.log"
  if [[ -s $logs/failed.txt ]]; then status=1; echo "failed: $(cat "$logs/failed.txt")" | tee -a "$OUT/tests.log"; fi
elif wants tests; then
  echo "== tests"
  python3 -m pytest -q -rs ${TESTS:-tests} 2>&1 | tee "$OUT/tests.log" | grep -vE '^\s*$' | tail -40
  status=${PIPESTATUS[0]}
fi

if wants fuzz; then
  echo "== randomized differential check"
  python3 scripts/fuzz_bits.py --seconds "${FUZZ_SECONDS:-120}" ${FUZZ_SEED:+--seed "$FUZZ_SEED"} 2>&1 | tee "$OUT/fuzz.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  echo "== randomized sequences through the caching layers"
  python3 scripts/fuzz_sequences.py --seconds "${SEQUENCES_SECONDS:-60}" ${FUZZ_SEED:+--seed "$FUZZ_SEED"} 2>&1 | tee "$OUT/fuzz_sequences.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
if wants bench; then
  echo "== benchmark"
  python3 -m ozaki.bench --json "$OUT/bench.json" --markdown "$OUT/bench.md" "$@" 2>&1 | tee "$OUT/bench.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
if wants study; then
  echo "== accuracy study"
  python3 -m ozaki.study accuracy --device cuda --csv "$OUT/study.csv" 2>&1 | tee "$OUT/study.log" | grep -v '^accuracy \['
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  echo "== reproducibility"
  python3 -m ozaki.study reproducibility 2>&1 | tee "$OUT/reproducibility.log" | grep -v '^reproducibility \['
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  echo "== accuracy study, int8 and crt backends"
  python3 -m ozaki.study accuracy --device cuda --backends crt int8 --csv "$OUT/study-backends.csv" 2>&1 | tee "$OUT/study-backends.log" | grep -v '^accuracy \['
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
if wants batched; then
  echo "== batched products"
  python3 scripts/batched_bench.py --out "$OUT" 2>&1 | tee "$OUT/batched.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
if wants profile; then
  echo "== crt profile"
  python3 scripts/crt_profile.py --out "$OUT" 2>&1 | tee "$OUT/profile.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
if wants wide; then
  echo "== rows of wide span"
  python3 scripts/wide_span_bench.py --out "$OUT" ${WIDE_SIZES:+--sizes $WIDE_SIZES} ${WIDE_PARTS:+--parts $WIDE_PARTS} 2>&1 | tee "$OUT/wide_spans.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
if wants exact; then
  echo "== exact scheme II"
  python3 scripts/exact_crt_bench.py --out "$OUT" --profile ${EXACT_SIZES:+--sizes $EXACT_SIZES} ${EXACT_DRAWS:+--draws $EXACT_DRAWS} 2>&1 | tee "$OUT/exact_crt.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
if [[ ,$what, == *,distributed,* ]]; then
  echo "== several GPUs"
  python3 scripts/distributed_bench.py --out "$OUT" 2>&1 | tee "$OUT/distributed.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
if [[ ,$what, == *,programs,* ]]; then
  echo "== real programs under ozaki.enable"
  python3 scripts/programs_bench.py --json "$OUT/programs.json" --markdown "$OUT/programs.md" 2>&1 | tee "$OUT/programs.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
if [[ ,$what, == *,gaps,* ]]; then
  echo "== where the GPU waits inside an eager default call"
  python3 scripts/probes/gpu_gaps.py ${GAPS_SHAPES:+--shapes $GAPS_SHAPES} ${GAPS_ARGS:-} 2>&1 | tee "$OUT/gpu_gaps.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
if [[ ,$what, == *,quick,* ]]; then
  echo "== replayed calls with and without the quick path"
  python3 scripts/probes/quick_replay.py ${QUICK_SHAPES:+--shapes $QUICK_SHAPES} 2>&1 | tee "$OUT/quick_replay.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
if [[ ,$what, == *,calls,* ]]; then
  echo "== kernels of a default call"
  python3 scripts/probes/call_kernels.py ${CALLS_SHAPES:+--shapes $CALLS_SHAPES} ${CALLS_ARGS:-} 2>&1 | tee "$OUT/call_kernels.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
if [[ ,$what, == *,paths,* ]]; then
  echo "== scheme II paths"
  python3 scripts/probes/crt_paths.py --json "$OUT/crt_paths.json" ${PATHS_SHAPES:+--shapes $PATHS_SHAPES} ${PATHS_WHICH:+--paths $PATHS_WHICH} ${PATHS_TIMING:+--timing $PATHS_TIMING} 2>&1 | tee "$OUT/crt_paths.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
if [[ ,$what, == *,result,* ]]; then
  echo "== replayed results moved or copied"
  python3 scripts/probes/replay_result.py ${RESULT_SHAPES:+--shapes $RESULT_SHAPES} 2>&1 | tee "$OUT/replay_result.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
if [[ ,$what, == *,tiles,* ]]; then
  echo "== reduced GEMM tiles"
  OUT=$OUT bash scripts/probes/reduced_tiles.sh ${TILES_SHAPES:-} 2>&1 | tail -5
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
if [[ ,$what, == *,waves,* ]]; then
  echo "== wave plan against memory plan"
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > /tmp/clocks.csv &
  sampler=$!
  python3 scripts/probes/tile_waves.py ${WAVES_SHAPES:+--shapes $WAVES_SHAPES} 2>&1 | tee "$OUT/tile_waves.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  kill $sampler
  python3 - /tmp/clocks.csv <<'PY' | tee -a "$OUT/tile_waves.log"
import statistics, sys
rows = [line.split(",") for line in open(sys.argv[1]) if line.count(",") == 1]
clocks = sorted(float(c) for c, _ in rows)
power = sorted(float(p) for _, p in rows)
busy = sorted(float(c) for c, p in rows if float(p) >= 500)
for name, values, unit in (("SM clock", clocks, "MHz"), ("power", power, "W"),
                           ("SM clock at 500 W or more", busy, "MHz")):
    if values:
        print(f"# {name} over {len(values)} samples of 100 ms: min {values[0]:.0f}, median "
              f"{statistics.median(values):.0f}, max {values[-1]:.0f} {unit}")
PY
fi
if [[ ,$what, == *,ncu,* ]]; then
  echo "== Nsight Compute: the kernels of one scheme-II product"
  ncu --clock-control none --kernel-name regex:"${NCU_KERNELS:-device_kernel|reconstruct}" \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section InstructionStats \
    --section Occupancy --section LaunchStats \
    --export "$OUT/ncu" --force-overwrite \
    python3 scripts/probes/ncu_call.py ${NCU_SHAPE:-16384 1024 16384} > "$OUT/ncu_run.log" 2>&1
  [[ $? == 0 ]] || status=1
  ncu --import "$OUT/ncu.ncu-rep" --print-details all > "$OUT/ncu.log" 2>&1
  ncu --import "$OUT/ncu.ncu-rep" --page raw > "$OUT/ncu_raw.log" 2>&1
  grep -E "${NCU_KERNELS:-device_kernel|reconstruct}|Duration|Throughput|Issue Slots Busy|Executed Ipc|No Eligible|Stall|Registers|Achieved Occupancy|Warp Cycles Per Issued" "$OUT/ncu.log" | head -80
fi
if [[ ,$what, == *,blocks,* ]]; then
  echo "== INT8 GEMM column blocks"
  python3 scripts/probes/int8_blocks.py 2>&1 | tee "$OUT/int8_blocks.log"
fi
if [[ ,$what, == *,kernels,* ]]; then
  echo "== scheme II element-wise passes"
  nvcc -O3 -std=c++20 -fmad=false --ftz=false -arch=sm_90 --expt-relaxed-constexpr \
    scripts/probes/crt_kernels_bench.cu -o /tmp/crt_kernels_bench && /tmp/crt_kernels_bench 2>&1 | tee "$OUT/crt_kernels.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
if [[ ,$what, == *,rate,* ]]; then
  echo "== INT8 GEMM rates"
  OUT=$OUT bash scripts/probes/int8_rate.sh 2>&1 | tail -60
fi
exit "$status"
