// persistent_kernel_hd256.cu: the head_dim 256 instances of persistent_kernel.cuh (bf16, f16).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "packserve/attention/cuda/cuda_check.h"
#include "packserve/attention/cuda/kernel_launch.h"
#include "packserve/attention/cuda/persistent_kernel.cuh"

namespace packserve::attention::cuda {
namespace {

template <typename T>
Status launch(const KernelParams& p, int num_ctas, cudaStream_t s) {
  return launch_programmatic(persistent_attention_kernel<256, T>, dim3(num_ctas), dim3(kThreads),
                             KernelTraits<256>::kSmemBytes, s, p);
}

template <typename T>
Status prepare(int* ctas_per_sm) {
  PS_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(persistent_attention_kernel<256, T>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               KernelTraits<256>::kSmemBytes));
  PS_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      ctas_per_sm, persistent_attention_kernel<256, T>, kThreads, KernelTraits<256>::kSmemBytes));
  return ok_status();
}

}  // namespace

Status launch_persistent_hd256(bool bf16, const KernelParams& p, int num_ctas, cudaStream_t s) {
  return bf16 ? launch<__nv_bfloat16>(p, num_ctas, s) : launch<__half>(p, num_ctas, s);
}
Status prepare_persistent_hd256(bool bf16, int* ctas_per_sm) {
  return bf16 ? prepare<__nv_bfloat16>(ctas_per_sm) : prepare<__half>(ctas_per_sm);
}

}  // namespace packserve::attention::cuda
