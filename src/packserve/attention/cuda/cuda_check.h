// cuda_check.h: CUDA runtime errors as Status (STYLE.md §5): kInternal carrying the call text,
// the CUDA error name and message, and file:line. Only for files under attention/cuda/.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "packserve/common/status.h"

namespace packserve::attention::cuda {

inline Status cuda_status(cudaError_t error, const char* call, const char* file, int line) {
  if (error == cudaSuccess) return ok_status();
  return internal_error(std::string(call) + " failed: " + cudaGetErrorName(error) + " (" +
                        cudaGetErrorString(error) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace packserve::attention::cuda

// Returns kInternal from the enclosing function when the CUDA call fails.
#define PS_CUDA_RETURN_IF_ERROR(call) \
  PS_RETURN_IF_ERROR(::packserve::attention::cuda::cuda_status((call), #call, __FILE__, __LINE__))
