#!/usr/bin/env bash
# Copies CUTLASS's headers from the installed nvidia-cutlass package into .cutlass/include (ignored
# by git), for building the reduced residue GEMM on a machine that cannot install the package:
# scripts/gpu_run.sh and setup.py (through OZAKI_CUTLASS_INCLUDE) build against that copy.
set -euo pipefail
cd "$(dirname "$0")/.."
source=$(python3 -c 'import importlib.util as u, os; s = u.find_spec("cutlass_library"); print(os.path.join(s.submodule_search_locations[0], "source", "include") if s else "")')
if [[ -z $source || ! -f $source/cutlass/cutlass.h ]]; then
  echo "the nvidia-cutlass package is not installed (pip install --no-deps nvidia-cutlass)" >&2
  exit 1
fi
rm -rf .cutlass/include
mkdir -p .cutlass
cp -r "$source" .cutlass/include
echo "CUTLASS headers copied to .cutlass/include ($(du -sh .cutlass/include | cut -f1))"
