// CPU kernel of ozaki::fingerprint (csrc/fingerprint.h): rows in parallel, each chunk's sum of
// terms added modulo 2^64, so the digest does not depend on how the rows were shared.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "../checks.h"
#include "../fingerprint.h"
#include "ops.h"

namespace ozaki::cpu {
namespace {

template <typename T>
uint64_t digest(const at::Tensor& a) {
  const T* data = a.const_data_ptr<T>();
  const int64_t m = a.size(0), k = a.size(1), row_step = a.stride(0), step = a.stride(1);
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(m, at::get_num_threads()));
  std::vector<uint64_t> sums(chunks, 0);
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t chunk = begin; chunk < end; ++chunk) {
      uint64_t sum = 0;
      for (int64_t r = chunk * m / chunks; r < (chunk + 1) * m / chunks; ++r) {
        for (int64_t c = 0; c < k; ++c) {
          sum += fingerprint_term(entry_bits(data[r * row_step + c * step]),
                                  static_cast<uint64_t>(r * k + c));
        }
      }
      sums[chunk] = sum;
    }
  });
  uint64_t total = 0;
  for (uint64_t sum : sums) total += sum;
  return total;
}

}  // namespace

at::Tensor fingerprint(const at::Tensor& a) {
  check_fingerprint_argument(a, "ozaki::fingerprint");
  const uint64_t total = a.scalar_type() == at::kDouble ? digest<double>(a) : digest<float>(a);
  int64_t bits;
  std::memcpy(&bits, &total, sizeof bits);
  return at::scalar_tensor(bits, a.options().dtype(at::kLong));
}

}  // namespace ozaki::cpu
