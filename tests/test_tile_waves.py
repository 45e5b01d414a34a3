"""The reduced path's wave plan (csrc/tile_waves.h), host code compiled here with the system's C++
compiler and run over many shapes, budgets and multiprocessor counts: a plan it changes fits the
same budget, counts at least 1% fewer tile waves than the memory plan it replaces, keeps whole
tiles and whole clusters of rows, and at 16384^3 with 15 moduli on 132 multiprocessors is the
documented one (docs/algorithm.md, "Chunks that fill the GPU's waves"). The GPU side (the same
bits under either plan) is in tests/test_crt_paths.py."""

import pathlib
import shutil
import subprocess

import pytest

CSRC = pathlib.Path(__file__).resolve().parent.parent / "csrc"

# For each case, the memory plan as csrc/cuda/crt.cu makes it (all rows, columns in chunks of at
# least 256) and the wave plan: "m n k moduli budget slots given_cols cols rows bytes given_cost
# cost", where bytes is the wave plan's workspace by crt.cu's count.
DRIVER = r"""
#include <cstdio>
#include "tile_waves.h"
using namespace ozaki;
int main() {
  const long long sides[] = {3000, 4096, 6144, 8192, 12288, 16384, 20000, 32768};
  const long long inners[] = {1024, 4096, 12288, 16384};
  const int moduli[] = {15, 16};
  const long long budgets_mib[] = {1024, 2048, 4096, 8192};
  const long long slots[] = {114, 132};
  for (long long m : sides) for (long long n : sides) for (long long k : inners)
  for (int N : moduli) for (long long mib : budgets_mib) for (long long s : slots) {
    const long long k_stride = round_up(k, 16), budget = mib << 20;
    const WorkspaceShape shape{k_stride, N, N, 1, 1, 16};
    if (shape.bytes_for(m, n) <= budget) continue;
    const ChunkPlan given = plan_column_chunks(m, n, shape, budget, 256);
    if (given.rows < m || given.cols >= n || given.cols < 256) continue;
    const auto bytes = [&](long long rows, long long cols) {
      return shape.bytes_for(m, rows, cols);
    };
    const TileWaves waves{N, 128, 256, 256, s, k_stride};
    const WavePlan plan = plan_tile_waves(waves, m, n, WavePlan{given.cols, m}, budget, bytes);
    std::printf("%lld %lld %lld %d %lld %lld %lld %lld %lld %lld %lld %lld\n", m, n, k, N, budget,
                s, (long long)given.cols, (long long)plan.cols, (long long)plan.rows,
                (long long)bytes(plan.rows, plan.cols),
                (long long)chunks_cost(waves, m, n, m, given.cols),
                (long long)chunks_cost(waves, m, n, plan.rows, plan.cols));
  }
}
"""


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    folder = tmp_path_factory.mktemp("tile_waves")
    source, program = folder / "driver.cpp", folder / "driver"
    source.write_text(DRIVER)
    subprocess.run([compiler, "-std=c++17", "-O1", f"-I{CSRC}", str(source), "-o", str(program)],
                   check=True)
    lines = subprocess.run([str(program)], check=True, capture_output=True, text=True).stdout
    keys = ("m", "n", "k", "moduli", "budget", "slots", "given_cols", "cols", "rows", "bytes",
            "given_cost", "cost")
    return [dict(zip(keys, map(int, line.split()))) for line in lines.splitlines()]


def test_changed_plans_fit_the_budget_and_count_fewer_waves(plans):
    changed = [p for p in plans if (p["cols"], p["rows"]) != (p["given_cols"], p["m"])]
    assert len(plans) > 100 and changed, (len(plans), len(changed))
    for p in changed:
        assert p["bytes"] <= p["budget"], p
        assert p["cost"] <= 0.99 * p["given_cost"], p
        assert p["cols"] == p["n"] or p["cols"] % 256 == 0, p
        assert p["rows"] == p["m"] or p["rows"] % 256 == 0, p


def test_unchanged_plans_are_the_memory_plans(plans):
    for p in plans:
        if p["rows"] == p["m"] and p["cols"] == p["given_cols"]:
            assert p["cost"] == p["given_cost"], p


@pytest.mark.parametrize("m,k,expected", [(16384, 16384, (512, 768, 5632)),
                                          (12288, 12288, (4096, 4096, 12288))])
def test_the_documented_plans(plans, m, k, expected):
    """16384^3 with 15 moduli, 4 GiB and 132 multiprocessors: chunks of 768 columns (the memory
    plan's 512) in launches of 5632 rows (docs/algorithm.md); 12288^3 keeps its memory plan,
    whose best alternative counts less than 1% fewer waves."""
    [p] = [p for p in plans if p["m"] == p["n"] == m and p["k"] == k and p["moduli"] == 15
           and p["budget"] == 4 << 30 and p["slots"] == 132]
    assert (p["given_cols"], p["cols"], p["rows"]) == expected
