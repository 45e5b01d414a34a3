// A replayed product's result written straight into a fresh tensor (docs/algorithm.md, "Replayed
// calls"): the captured graph's kernels that write the result take its address as a plain pointer
// argument; those arguments of the instantiated graph are set to a fresh tensor's address for the
// next replay, so no copy of the graph's own result is needed.
//
// The plan's values reach the host inside the captured graph: a copy into pinned memory queued on
// the current stream, which a capture records as a graph node (no separate copy per replay).
//
// Python (ozaki/replay.py) reaches this through three functions of ozaki._C
// (csrc/graph_result.cpp); the CUDA backend (csrc/cuda/graph_result.cu) supplies them. A CPU build
// has none and raises.
#pragma once

#include <cstdint>
#include <vector>

namespace ozaki {

struct GraphResultHooks {
  // The sites (node handle, then its argument count, per site) of the graph's kernels that write
  // the result at [address, address + bytes), or nothing where the graph cannot be moved to
  // another result: a node that does not run before every writer reaches the range in any other
  // way (another kernel, an argument inside a structure or past the start, a copy or fill) or
  // cannot be read (a kernel of unknown arguments, a node of a kind not read). Nodes that run
  // before every writer may touch the range (temporaries of the plan's reads in the block the
  // result later took): nothing reads the result through them.
  std::vector<int64_t> (*sites)(int device, int64_t graph, int64_t address,
                               int64_t bytes) = nullptr;
  // Sets the result argument of each site in the instantiated graph `exec` to `target`.
  void (*retarget)(int device, int64_t exec, const std::vector<int64_t>& sites,
                   int64_t target) = nullptr;
  // Queues a copy of `bytes` from device memory at `source` into pinned host memory at `target`
  // on the current stream of `device` (a graph node where that stream is being captured).
  void (*copy_to_host)(int device, int64_t source, int64_t target, int64_t bytes) = nullptr;
};

GraphResultHooks& graph_result_hooks();

// Kernels that write a product's result through their argument number `argument` (a plain T*),
// noted by their launch sites once per kernel: the only nodes that sites() accepts in the range.
void note_result_writer(const void* kernel, int argument);
// The argument by which `kernel` writes a result, or -1 where it was not noted.
int result_writer_argument(const void* kernel);

}  // namespace ozaki
