// CHECK(call): the probes' CUDA error check, printing where it failed and exiting.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));      \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)
