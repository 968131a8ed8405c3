// persistent_kernel.cu: dispatch of the persistent attention kernel on (head_dim, dtype).
// Compiled: head_dim 64/128/256 x bf16/f16 x KV of that type or float8 e4m3 (one translation
// unit per head_dim).
#include <string>

#include "packserve/attention/cuda/kernel_launch.h"

namespace packserve::attention::cuda {
namespace {

Status not_compiled(int head_dim, DType dtype) {
  return unimplemented("attention kernel for head_dim=" + std::to_string(head_dim) +
                       " dtype=" + std::string(dtype_name(dtype)) +
                       " is not compiled (compiled: head_dim 64/128/256 x bf16/f16)");
}

bool compiled_dtype(DType dtype) { return dtype == DType::kBF16 || dtype == DType::kF16; }

}  // namespace

Status launch_persistent(int head_dim, DType dtype, bool fp8_kv, int max_pass_rows,
                         const KernelParams& params, int num_ctas, cudaStream_t stream) {
  if (!compiled_dtype(dtype)) return not_compiled(head_dim, dtype);
  const bool bf16 = dtype == DType::kBF16;
  switch (head_dim) {
    case 64:
      return launch_persistent_hd64(bf16, fp8_kv, params, num_ctas, stream);
    case 128:
      return launch_persistent_hd128(bf16, fp8_kv, max_pass_rows, params, num_ctas, stream);
    case 256:
      return launch_persistent_hd256(bf16, fp8_kv, params, num_ctas, stream);
    default:
      return not_compiled(head_dim, dtype);
  }
}

Result<int> persistent_occupancy(int head_dim, DType dtype) {
  if (!compiled_dtype(dtype)) return not_compiled(head_dim, dtype);
  const bool bf16 = dtype == DType::kBF16;
  int ctas_per_sm = 0;
  switch (head_dim) {
    case 64:
      PS_RETURN_IF_ERROR(prepare_persistent_hd64(bf16, &ctas_per_sm));
      break;
    case 128:
      PS_RETURN_IF_ERROR(prepare_persistent_hd128(bf16, &ctas_per_sm));
      break;
    case 256:
      PS_RETURN_IF_ERROR(prepare_persistent_hd256(bf16, &ctas_per_sm));
      break;
    default:
      return not_compiled(head_dim, dtype);
  }
  return ctas_per_sm;
}

Status prepare_persistent(int head_dim, DType dtype) {
  PS_ASSIGN_OR_RETURN(const int ctas_per_sm, persistent_occupancy(head_dim, dtype));
  if (ctas_per_sm < 1) {
    return resource_exhausted("attention kernel head_dim=" + std::to_string(head_dim) +
                              " cannot be resident on this device (0 CTAs per SM)");
  }
  return ok_status();
}

Result<int> persistent_smem_bytes(int head_dim, DType dtype) {
  if (!compiled_dtype(dtype)) return not_compiled(head_dim, dtype);
  switch (head_dim) {
    case 64:
      return KernelTraits<64>::kSmemBytes;
    case 128:
      return KernelTraits<128>::kSmemBytes;
    case 256:
      return KernelTraits<256>::kSmemBytes;
    default:
      return not_compiled(head_dim, dtype);
  }
}

}  // namespace packserve::attention::cuda
