// CPU kernel of ozaki::transposed: torch's own copy (the CPU backend is for testing). clone, not
// contiguous(): the schema promises a fresh tensor, and b.mT may already be contiguous.
#include <ATen/ATen.h>

#include "../checks.h"
#include "ops.h"

namespace ozaki::cpu {

at::Tensor transposed(const at::Tensor& b) {
  check_transposed_argument(b, "ozaki::transposed");
  return b.mT().clone(at::MemoryFormat::Contiguous);
}

}  // namespace ozaki::cpu
