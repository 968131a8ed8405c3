// device_util.cuh: CUDA helpers of the model's CUDA backend (model/cuda only): runtime errors
// as Status (kInternal with the call text, the CUDA error name and file:line) and an owning
// device allocation. Thread-safety: none (a value owned by one backend).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

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

}  // namespace packserve::model::cuda

#define PS_MODEL_CUDA_RETURN_IF_ERROR(call) \
  PS_RETURN_IF_ERROR(::packserve::model::cuda::cuda_status((call), #call, __FILE__, __LINE__))
