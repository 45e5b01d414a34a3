#!/usr/bin/env bash
# Builds scripts/probes/reduced_tiles.cu for a set of tiles, clusters and schedules (in parallel)
# and runs each over the shapes given (M,N,K,PLANES ...; default: the crt_paths shapes with 15
# moduli), on a GPU of compute capability 9.0. BUILD_ONLY=1 builds (no GPU needed), RUN_ONLY=1
# runs earlier builds. Binaries go to $BIN (default /tmp/reduced_tiles), the log to
# $OUT/reduced_tiles.log (default ./gpu-logs).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-./gpu-logs}
BIN=${BIN:-/tmp/reduced_tiles}
mkdir -p "$OUT" "$BIN"
CUTLASS=${OZAKI_CUTLASS_INCLUDE:-$PWD/.cutlass/include}
# name: tile M N K, cluster M N, schedule (0 cooperative, 1 ping-pong), discard (1: no stores;
# 2 to 9: parts of the epilogue as it was at 5164ad7, see reduced_tiles.cu), then any further
# flags (-DOVERLAP=1: the epilogue beside the products, reduced_overlap.cuh; -DPARTS=n its parts;
# -DRESIDENT_BLOCKS=b -DSTAGES=n: b blocks of one warpgroup per multiprocessor,
# reduced_resident_blocks.cuh)
CONFIGS=(
  "coop128x256c21 128 256 128 2 1 0 0"
  "coop128x256c21discard 128 256 128 2 1 0 1"
  "coop128x256c21reduce 128 256 128 2 1 0 2"
  "coop128x256c21stage 128 256 128 2 1 0 3"
  "coop128x256c21store 128 256 128 2 1 0 4"
  "coop128x256c21exchange 128 256 128 2 1 0 5"
  "coop128x256c21sharedstores 128 256 128 2 1 0 6"
  "coop128x256c21barriers 128 256 128 2 1 0 7"
  "coop128x256c21warprows 128 256 128 2 1 0 8"
  "coop128x256c21lowbytes 128 256 128 2 1 0 9"
  "coop128x256c12 128 256 128 1 2 0 0"
  "coop128x256c22 128 256 128 2 2 0 0"
  "coop128x256c41 128 256 128 4 1 0 0"
  "coop256x128c12 256 128 128 1 2 0 0"
  "coop256x128c21 256 128 128 2 1 0 0"
  "coop128x128c21 128 128 128 2 1 0 0"
  "ping128x128c12 128 128 128 1 2 1 0"
  "ping128x128c21 128 128 128 2 1 1 0"
  "ping128x128c21discard 128 128 128 2 1 1 1"
  "ping64x256c21 64 256 128 2 1 1 0"
  "ping64x256c12 64 256 128 1 2 1 0"
  "coop128x64c11 128 64 128 1 1 0 0"
  "coop128x64c21 128 64 128 2 1 0 0"
  "coop128x64k256c11 128 64 256 1 1 0 0"
  "coop128x64k64c11 128 64 64 1 1 0 0"
  "coop256x64c11 256 64 128 1 1 0 0"
  "coop128x32c11 128 32 128 1 1 0 0"
  "coop128x32k256c11 128 32 256 1 1 0 0"
  "ping64x64c11 64 64 128 1 1 1 0"
  "ping64x32c11 64 32 128 1 1 1 0"
  "overlap128x256c21 128 256 64 2 1 0 0 -DOVERLAP=1"
  "overlap128x256c21idle 128 256 64 2 1 0 0 -DOVERLAP=1 -DPARTS=1"
  "overlap128x256c21barriers 128 256 64 2 1 0 0 -DOVERLAP=1 -DPARTS=0"
  "two128x128k64s5c11 128 128 64 1 1 0 0 -DRESIDENT_BLOCKS=2 -DSTAGES=5"
  "two128x128k64s5c21 128 128 64 2 1 0 0 -DRESIDENT_BLOCKS=2 -DSTAGES=5"
  "two128x128k64s5c12 128 128 64 1 2 0 0 -DRESIDENT_BLOCKS=2 -DSTAGES=5"
  "two128x128k64s5c22 128 128 64 2 2 0 0 -DRESIDENT_BLOCKS=2 -DSTAGES=5"
  "two128x128k128s3c21 128 128 128 2 1 0 0 -DRESIDENT_BLOCKS=2 -DSTAGES=3"
  "three128x128k64s4c21 128 128 64 2 1 0 0 -DRESIDENT_BLOCKS=3 -DSTAGES=4"
  "three128x128k64s4c11 128 128 64 1 1 0 0 -DRESIDENT_BLOCKS=3 -DSTAGES=4")
# TILES_CONFIGS: the names of the configurations to build and run (default: all of them)
if [[ -n ${TILES_CONFIGS:-} ]]; then
  chosen=()
  for config in "${CONFIGS[@]}"; do
    read -r name _ <<< "$config"
    [[ " $TILES_CONFIGS " == *" $name "* ]] && chosen+=("$config")
  done
  CONFIGS=("${chosen[@]}")
fi
SHAPES=("$@")
if [[ ${#SHAPES[@]} == 0 ]]; then
  SHAPES=(1024,1024,1024,15 2048,2048,2048,15 4096,4096,4096,15 8192,8192,8192,15
          16384,16384,1024,15 16384,64,16384,15 16384,16384,16384,15)
fi
if [[ ${RUN_ONLY:-0} != 1 ]]; then
  for config in "${CONFIGS[@]}"; do
    read -r name tm tn tk cm cn schedule discard flags <<< "$config"
    [[ -x $BIN/$name ]] && continue
    echo "nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I$CUTLASS -DTILE_M=$tm -DTILE_N=$tn -DTILE_K=$tk -DCLUSTER_M=$cm -DCLUSTER_N=$cn -DSCHEDULE=$schedule -DDISCARD=$discard ${flags:-} scripts/probes/reduced_tiles.cu -o $BIN/$name > $BIN/$name.build.log 2>&1 || echo 'build of $name failed'"
  done | xargs -P "${JOBS:-$(nproc)}" -I{} bash -c {}
  grep -l "C7510\|error" "$BIN"/*.build.log 2>/dev/null | sed 's/^/see /'
fi
[[ ${BUILD_ONLY:-0} == 1 ]] && exit 0
for config in "${CONFIGS[@]}"; do
  read -r name _ <<< "$config"
  [[ -x $BIN/$name ]] && "$BIN/$name" "${SHAPES[@]}"
done 2>&1 | tee "$OUT/reduced_tiles.log"
