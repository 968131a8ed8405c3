// device_util.cuh: CUDA helpers of the model's CUDA backend (model/cuda only): runtime errors
// as Status (kInternal with the call text, the CUDA error name and file:line), an owning
// device allocation, and the step kernels' launch (launch_step_kernel). Thread-safety: none
// (a value owned by one backend); launch_step_kernel is a pure launch.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <utility>

#include "packserve/attention/cuda/programmatic_launch.cuh"
#include "packserve/common/status.h"

namespace packserve::model::cuda {

inline Status cuda_status(cudaError_t error, const char* call, const char* file, int line) {
  if (error == cudaSuccess) return ok_status();
  return internal_error(std::string(call) + " failed: " + cudaGetErrorName(error) + " (" +
                        cudaGetErrorString(error) + ") at " + file + ":" + std::to_string(line));
}

// Owning cudaMalloc'ed bytes (move-only). alloc() of 0 bytes allocates 256 so get() != null.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(DeviceMemory&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  // Frees and allocates `bytes`; kResourceExhausted naming `what` and the byte count.
  Status alloc(size_t bytes, const std::string& what) {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    if (cudaMalloc(&ptr_, bytes > 0 ? bytes : 256) != cudaSuccess) {
      (void)cudaGetLastError();
      ptr_ = nullptr;
      return resource_exhausted("cuda forward: cannot allocate " + std::to_string(bytes) +
                                " bytes of device memory for " + what);
    }
    bytes_ = bytes;
    return ok_status();
  }
  // Grows to at least `bytes` (contents lost when it grows).
  Status reserve(size_t bytes, const std::string& what) {
    if (ptr_ != nullptr && bytes <= bytes_) return ok_status();
    return alloc(bytes, what);
  }
  template <typename T = void>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// The most rows of a step whose kernels launch_step_kernel launches programmatically: 8, or
// the environment's PACKSERVE_PROGRAMMATIC_LAUNCH (read once; 0: none; there to measure what
// they give).
inline int programmatic_step_rows() {
  static const int rows = [] {
    const char* v = std::getenv("PACKSERVE_PROGRAMMATIC_LAUNCH");
    return v == nullptr ? 8 : std::max(0, std::atoi(v));
  }();
  return rows;
}

// Launches one of the forward step's kernels (ops.cu's row and element-wise kernels,
// skinny_gemm.cu) for a step of `rows` rows; up to programmatic_step_rows() rows as a
// programmatic dependent launch (programmatic_launch.cuh), so that its launch and its first
// loads of constant data (weights) overlap the tail of the kernel before it. Every kernel
// launched here must call wait_for_previous_grid() on every path before it touches memory an
// earlier kernel writes (and before it exits). Returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t launch_step_kernel(int rows, void (*kernel)(Params...), dim3 grid, dim3 block,
                               size_t smem_bytes, cudaStream_t stream, Args&&... args) {
  return attention::cuda::launch_kernel(rows <= programmatic_step_rows(), kernel, grid, block,
                                        smem_bytes, stream, std::forward<Args>(args)...);
}

// The start of a kernel launched by launch_step_kernel: waits for the kernel before it, then
// lets the next one be scheduled (its blocks then wait in turn, in slots this grid's leave).
__device__ __forceinline__ void step_kernel_start() {
  attention::cuda::wait_for_previous_grid();
  attention::cuda::allow_dependent_launch();
}

}  // namespace packserve::model::cuda

#define PS_MODEL_CUDA_RETURN_IF_ERROR(call) \
  PS_RETURN_IF_ERROR(::packserve::model::cuda::cuda_status((call), #call, __FILE__, __LINE__))
