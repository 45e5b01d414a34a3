// CPU kernel of ozaki::int8_matmul: exact through float64 (every partial sum below 2^31).
#include <ATen/ATen.h>

#include "../checks.h"
#include "ops.h"

namespace ozaki::cpu {

at::Tensor int8_matmul(const at::Tensor& a, const at::Tensor& bt) {
  check_int8_operands(a, bt, "ozaki::int8_matmul");
  return at::mm(a.to(at::kDouble), bt.to(at::kDouble).t()).to(at::kInt);
}

}  // namespace ozaki::cpu
