// wide_kernel_hd128.cu: the instances of wide_kernel.cuh (head_dim 128; bf16, f16).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdlib>
#include <string>

#include "packserve/attention/cuda/cuda_check.h"
#include "packserve/attention/cuda/kernel_launch.h"
#include "packserve/attention/cuda/wide_kernel.cuh"

namespace packserve::attention::cuda {
namespace {

template <typename T>
Status launch(const KernelParams& p, int num_ctas, cudaStream_t s) {
  return launch_programmatic(wide_attention_kernel<T>, dim3(num_ctas), dim3(wide::kThreads),
                             wide::Layout::kSmemBytes, s, p);
}

template <typename T>
Status prepare(int* ctas_per_sm) {
  constexpr int smem = wide::Layout::kSmemBytes;
  PS_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(wide_attention_kernel<T>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  PS_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      ctas_per_sm, wide_attention_kernel<T>, wide::kThreads, smem));
  return ok_status();
}

}  // namespace

// The wide kernel needs sm_90 (wgmma, setmaxnreg); PACKSERVE_WIDE_KERNEL=0 turns it off (every
// item then runs on the persistent kernel, as on other devices).
bool wide_kernel_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("PACKSERVE_WIDE_KERNEL");
    if (v != nullptr && std::string(v) == "0") return false;
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
      return false;
    return major == 9;
  }();
  return enabled;
}

Result<int> wide_kernel_ctas() {
  static const Result<int> ctas = []() -> Result<int> {
    int device = 0, sms = 0, per_sm = 0;
    PS_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
    PS_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    // Both instances have the same resources: the second sets per_sm.
    PS_RETURN_IF_ERROR(prepare<__nv_bfloat16>(&per_sm));
    PS_RETURN_IF_ERROR(prepare<__half>(&per_sm));
    if (per_sm < 1) return resource_exhausted("wide attention kernel: 0 CTAs per SM");
    return sms * per_sm;
  }();
  return ctas;
}

Status launch_wide_hd128(bool bf16, const KernelParams& p, int num_ctas, cudaStream_t s) {
  return bf16 ? launch<__nv_bfloat16>(p, num_ctas, s) : launch<__half>(p, num_ctas, s);
}

}  // namespace packserve::attention::cuda
