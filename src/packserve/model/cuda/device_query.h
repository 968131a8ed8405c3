// device_query.h: what the backend factory (model/factory) needs to know about the CUDA
// devices before it creates a CudaForwardBackend: how many there are and the free/total memory
// of one. Host C++ interface, no CUDA header (STYLE.md §1); implemented in device_query.cu.
// Side effect: cuda_device_memory() creates the device's primary context (the same one the
// backend then uses), so the free bytes it reports already exclude the context's own memory.
// Thread-safety: both functions may be called from any thread.
#pragma once

#include <cstddef>

#include "packserve/common/status.h"

namespace packserve::model::cuda {

// Number of CUDA devices; 0 when there is no driver or no device (never an error).
int cuda_device_count();

struct CudaDeviceMemory {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

// cudaMemGetInfo on `device`. Errors: kFailedPrecondition when there is no device or `device`
// is out of range (naming the count); kInternal for another CUDA failure.
Result<CudaDeviceMemory> cuda_device_memory(int device);

}  // namespace packserve::model::cuda
