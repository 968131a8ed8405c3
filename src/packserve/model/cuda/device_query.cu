// device_query.cu: device count and memory for the backend factory (device_query.h).
#include <cuda_runtime.h>

#include <string>

#include "packserve/model/cuda/device_query.h"
#include "packserve/model/cuda/device_util.cuh"

namespace packserve::model::cuda {

int cuda_device_count() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device: clear the sticky error, report 0
    return 0;
  }
  return devices;
}

Result<CudaDeviceMemory> cuda_device_memory(int device) {
  const int devices = cuda_device_count();
  if (devices == 0) return failed_precondition("no CUDA device is visible");
  if (device < 0 || device >= devices) {
    return failed_precondition("CUDA device " + std::to_string(device) + " does not exist (" +
                               std::to_string(devices) + " visible)");
  }
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  CudaDeviceMemory memory;
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&memory.free_bytes, &memory.total_bytes));
  return memory;
}

}  // namespace packserve::model::cuda
