// The three outputs of ozaki::row_stats (tau, bit_span, nonfinite) for `rows` rows on a.options()'s
// device, with their data pointers: shared by the CPU and CUDA operators that produce them.
#pragma once

#include <ATen/ATen.h>

#include "scheme.h"

namespace ozaki {

struct RowStatsOutput {
  at::Tensor tau, bit_span, nonfinite;
  int* tau_data;
  int* bit_span_data;
  bool* nonfinite_data;

  RowStatsOutput(int64_t rows, const at::TensorOptions& options)
      : tau(at::empty({rows}, options.dtype(at::kInt))),
        bit_span(at::empty({rows}, options.dtype(at::kInt))),
        nonfinite(at::empty({rows}, options.dtype(at::kBool))),
        tau_data(tau.mutable_data_ptr<int>()),
        bit_span_data(bit_span.mutable_data_ptr<int>()),
        nonfinite_data(nonfinite.mutable_data_ptr<bool>()) {}

  // Host memory only (the CPU operators; the CUDA kernels write through the pointers).
  void write(int64_t row, const RowStats& stats) const {
    tau_data[row] = stats.tau();
    bit_span_data[row] = stats.bit_span();
    nonfinite_data[row] = stats.nonfinite;
  }
};

}  // namespace ozaki
