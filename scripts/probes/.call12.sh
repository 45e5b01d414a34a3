#!/bin/bash
cd "$(dirname "$0")/../.."
TESTS="tests/test_crt_paths.py" bash scripts/gpu_run.sh tests
mkdir -p $OUT/profile && timeout 200 python3 scripts/crt_profile.py 4096 --shape 16384 1024 16384 --moduli 15 --sgemm-moduli --out $OUT/profile 2>&1 | tail -30 | tee $OUT/profile.log
