// median_ms(launch, repeats): the probes' GPU timing of launch(), queued on the default stream.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "check.cuh"

// The median of `repeats` timings of launch() by CUDA events, after two launches that warm up
// (none where repeats is 1, as under a profiler that should see one launch).
template <typename Launch>
float median_ms(Launch launch, int repeats) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  if (repeats > 1) {
    launch();
    launch();
  }
  std::vector<float> times;
  for (int r = 0; r < repeats; ++r) {
    CHECK(cudaEventRecord(start));
    launch();
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[repeats / 2];
}
