// The CUDA side of csrc/graph_result.h: a captured graph's nodes read for the places that
// reach its result, the result argument of its writers set in the instantiated graph, and the copy
// of the plan's values to the host queued on the current stream.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../graph_result.h"

namespace ozaki::cuda {
namespace {

// Bytes [begin, end) of device memory.
struct Span {
  uint64_t begin, end;
  bool meets(const Span& other) const { return begin < other.end && other.begin < end; }
  bool holds(uint64_t address) const { return begin <= address && address < end; }
};

// The sizes of kernel's arguments, or false where the runtime cannot tell them (a kernel it does
// not know by this address, launched through the driver): such a node cannot be read.
bool argument_sizes(const void* kernel, std::vector<size_t>* sizes) {
  sizes->clear();
  for (size_t i = 0;; ++i) {
    size_t offset = 0, size = 0;
    const cudaError_t status = cudaFuncGetParamInfo(kernel, i, &offset, &size);
    if (status == cudaSuccess) {
      sizes->push_back(size);
      continue;
    }
    (void)cudaGetLastError();
    // past the last argument; no argument at all is taken as unknown
    return status == cudaErrorInvalidValue && i > 0;
  }
}

// The bytes a pitched copy side touches, over-counted where in doubt (a copy near the result
// then keeps the replay's copy of it, never the reverse).
Span pitched_span(const cudaPitchedPtr& at, const cudaPos& position, const cudaExtent& extent) {
  const uint64_t pitch = std::max<uint64_t>(at.pitch, extent.width);
  const uint64_t rows = std::max<uint64_t>(at.ysize, std::max<uint64_t>(extent.height, 1));
  const uint64_t begin = reinterpret_cast<uint64_t>(at.ptr) + position.x +
                         (position.y + position.z * rows) * pitch;
  const uint64_t length = (std::max<uint64_t>(extent.depth, 1) * rows) * pitch + extent.width;
  return {begin, begin + length};
}

enum class Reach { none, writer, other };

// How kernel node `node` reaches `result`: not at all, as a noted writer whose result argument is
// exactly the result's start, or otherwise (any other word of any argument within the result).
Reach kernel_reach(cudaGraphNode_t node, const Span& result, size_t* arguments) {
  cudaKernelNodeParams params{};
  if (cudaGraphKernelNodeGetParams(node, &params) != cudaSuccess) {
    (void)cudaGetLastError();
    return Reach::other;
  }
  std::vector<size_t> sizes;
  if (params.kernelParams == nullptr || !argument_sizes(params.func, &sizes)) return Reach::other;
  const int writer = result_writer_argument(params.func);
  bool writes = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto* bytes = static_cast<const uint8_t*>(params.kernelParams[i]);
    for (size_t w = 0; w + sizeof(uint64_t) <= sizes[i]; w += sizeof(uint64_t)) {
      uint64_t word;
      std::memcpy(&word, bytes + w, sizeof(word));
      if (!result.holds(word)) continue;
      if (static_cast<int>(i) == writer && sizes[i] == sizeof(uint64_t) && word == result.begin) {
        writes = true;
        continue;
      }
      return Reach::other;
    }
  }
  *arguments = sizes.size();
  return writes ? Reach::writer : Reach::none;
}

// The nodes that run before every node of `last` (ancestors of each of them, by the graph's edges).
std::unordered_set<cudaGraphNode_t> common_ancestors(cudaGraph_t graph,
                                                     const std::vector<cudaGraphNode_t>& last) {
  size_t count = 0;
  C10_CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &count));
  std::vector<cudaGraphNode_t> from(count), to(count);
  std::vector<cudaGraphEdgeData> data(count);
  C10_CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &count));
  std::unordered_multimap<cudaGraphNode_t, cudaGraphNode_t> before;
  for (size_t e = 0; e < count; ++e) before.emplace(to[e], from[e]);
  std::unordered_set<cudaGraphNode_t> common;
  for (size_t i = 0; i < last.size(); ++i) {
    std::unordered_set<cudaGraphNode_t> seen;
    std::vector<cudaGraphNode_t> pending{last[i]};
    while (!pending.empty()) {
      const cudaGraphNode_t node = pending.back();
      pending.pop_back();
      const auto range = before.equal_range(node);
      for (auto it = range.first; it != range.second; ++it) {
        if (seen.insert(it->second).second) pending.push_back(it->second);
      }
    }
    if (i == 0) {
      common = std::move(seen);
    } else {
      for (auto it = common.begin(); it != common.end();) {
        it = seen.count(*it) ? std::next(it) : common.erase(it);
      }
    }
  }
  return common;
}

std::vector<int64_t> result_sites(int device, int64_t graph_handle, int64_t address,
                                  int64_t bytes) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  const auto graph = reinterpret_cast<cudaGraph_t>(graph_handle);
  const Span result{static_cast<uint64_t>(address), static_cast<uint64_t>(address + bytes)};
  size_t count = 0;
  C10_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  C10_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  std::vector<int64_t> sites;
  std::vector<cudaGraphNode_t> writers;
  // Nodes that reach the range otherwise, or cannot be read: allowed only where they run before
  // every writer (the plan's reads, whose freed temporaries the result's block may have held, and
  // torch's own kernels among them: nothing reads the result through them).
  std::vector<cudaGraphNode_t> others;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    C10_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    switch (type) {
      case cudaGraphNodeTypeKernel: {
        size_t arguments = 0;
        const Reach reach = kernel_reach(node, result, &arguments);
        if (reach == Reach::other) others.push_back(node);
        if (reach == Reach::writer) {
          sites.push_back(reinterpret_cast<int64_t>(node));
          sites.push_back(static_cast<int64_t>(arguments));
          writers.push_back(node);
        }
        break;
      }
      case cudaGraphNodeTypeMemcpy: {
        cudaMemcpy3DParms copy{};
        C10_CUDA_CHECK(cudaGraphMemcpyNodeGetParams(node, &copy));
        if ((copy.srcPtr.ptr != nullptr &&
             pitched_span(copy.srcPtr, copy.srcPos, copy.extent).meets(result)) ||
            (copy.dstPtr.ptr != nullptr &&
             pitched_span(copy.dstPtr, copy.dstPos, copy.extent).meets(result))) {
          others.push_back(node);
        }
        break;
      }
      case cudaGraphNodeTypeMemset: {
        cudaMemsetParams fill{};
        C10_CUDA_CHECK(cudaGraphMemsetNodeGetParams(node, &fill));
        const uint64_t begin = reinterpret_cast<uint64_t>(fill.dst);
        const uint64_t rows = std::max<uint64_t>(fill.height, 1);
        const uint64_t row_bytes = uint64_t(fill.width) * fill.elementSize;
        const Span filled{begin, begin + rows * std::max<uint64_t>(fill.pitch, row_bytes)};
        if (filled.meets(result)) others.push_back(node);
        break;
      }
      case cudaGraphNodeTypeEmpty:
      case cudaGraphNodeTypeWaitEvent:
      case cudaGraphNodeTypeEventRecord:
        break;
      default:  // child graphs, host nodes, allocations, conditionals: not read
        others.push_back(node);
    }
  }
  if (writers.empty()) return {};
  if (!others.empty()) {
    const auto earlier = common_ancestors(graph, writers);
    for (cudaGraphNode_t node : others) {
      if (!earlier.count(node)) return {};
    }
  }
  return sites;
}

void retarget_result(int device, int64_t exec_handle, const std::vector<int64_t>& sites,
                     int64_t target) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  // the writers may store 16 bytes at once where the captured result was so aligned
  if (target % 16 != 0) {
    throw std::runtime_error("ozaki: a replayed graph's result must be 16-byte aligned");
  }
  const auto exec = reinterpret_cast<cudaGraphExec_t>(exec_handle);
  void* target_address = reinterpret_cast<void*>(target);
  std::vector<void*> arguments;
  for (size_t s = 0; s + 1 < sites.size(); s += 2) {
    const auto node = reinterpret_cast<cudaGraphNode_t>(sites[s]);
    cudaKernelNodeParams params{};
    C10_CUDA_CHECK(cudaGraphKernelNodeGetParams(node, &params));  // the captured arguments
    const int writer = result_writer_argument(params.func);
    const auto count = static_cast<size_t>(sites[s + 1]);
    if (writer < 0 || static_cast<size_t>(writer) >= count) {
      throw std::runtime_error("ozaki: a replayed graph's result writer is no longer known");
    }
    arguments.assign(params.kernelParams, params.kernelParams + count);
    arguments[writer] = &target_address;
    params.kernelParams = arguments.data();
    params.extra = nullptr;
    C10_CUDA_CHECK(cudaGraphExecKernelNodeSetParams(exec, node, &params));
  }
}

void copy_to_host(int device, int64_t source, int64_t target, int64_t bytes) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  C10_CUDA_CHECK(cudaMemcpyAsync(reinterpret_cast<void*>(target),
                                 reinterpret_cast<const void*>(source), static_cast<size_t>(bytes),
                                 cudaMemcpyDeviceToHost,
                                 c10::cuda::getCurrentCUDAStream(device).stream()));
}

const bool hooks_set = [] {
  GraphResultHooks& hooks = graph_result_hooks();
  hooks.sites = &result_sites;
  hooks.retarget = &retarget_result;
  hooks.copy_to_host = &copy_to_host;
  return true;
}();

}  // namespace
}  // namespace ozaki::cuda
