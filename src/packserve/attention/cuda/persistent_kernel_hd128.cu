// persistent_kernel_hd128.cu: the head_dim 128 instances of persistent_kernel.cuh (bf16, f16; KV of
// the same type or float8, the float8 one with 128-row passes and without).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "packserve/attention/cuda/cuda_check.h"
#include "packserve/attention/cuda/kernel_launch.h"
#include "packserve/attention/cuda/persistent_kernel.cuh"

namespace packserve::attention::cuda {
namespace {

template <typename T>
Status launch(bool fp8_kv, int max_pass_rows, const KernelParams& p, int num_ctas, cudaStream_t s) {
  auto* kernel = !fp8_kv               ? persistent_attention_kernel<128, T, false>
                 : max_pass_rows <= 64 ? persistent_attention_kernel<128, T, true, 64>
                                       : persistent_attention_kernel<128, T, true>;
  return launch_programmatic(kernel, dim3(num_ctas), dim3(kThreads), KernelTraits<128>::kSmemBytes,
                             s, p);
}

// Every variant's shared-memory limit; the CTAs per SM that all allow.
template <typename T>
Status prepare(int* ctas_per_sm) {
  *ctas_per_sm = 1 << 20;
  for (auto* kernel :
       {persistent_attention_kernel<128, T, false>, persistent_attention_kernel<128, T, true>,
        persistent_attention_kernel<128, T, true, 64>}) {
    PS_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, KernelTraits<128>::kSmemBytes));
    int n = 0;
    PS_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &n, kernel, kThreads, KernelTraits<128>::kSmemBytes));
    *ctas_per_sm = std::min(*ctas_per_sm, n);
  }
  return ok_status();
}

}  // namespace

Status launch_persistent_hd128(bool bf16, bool fp8_kv, int max_pass_rows, const KernelParams& p,
                               int num_ctas, cudaStream_t s) {
  return bf16 ? launch<__nv_bfloat16>(fp8_kv, max_pass_rows, p, num_ctas, s)
              : launch<__half>(fp8_kv, max_pass_rows, p, num_ctas, s);
}
Status prepare_persistent_hd128(bool bf16, int* ctas_per_sm) {
  return bf16 ? prepare<__nv_bfloat16>(ctas_per_sm) : prepare<__half>(ctas_per_sm);
}

}  // namespace packserve::attention::cuda
