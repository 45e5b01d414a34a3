// The probes' launch of a kernel in thread-block clusters (reduced_overlap.cuh,
// reduced_resident_blocks.cuh): grid, block, dynamic shared memory and a cluster of
// cluster_x x cluster_y blocks, through cudaLaunchKernelEx.
#pragma once

#include <cuda_runtime.h>

template <class Params>
cudaError_t launch_in_clusters(void (*kernel)(Params), dim3 grid, int threads, int shared_bytes,
                               unsigned cluster_x, unsigned cluster_y, cudaStream_t stream,
                               const Params& params) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(threads, 1, 1);
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = cluster_x;
  cluster.val.clusterDim.y = cluster_y;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, params);
}
