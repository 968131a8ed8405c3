// programmatic_launch.cuh: programmatic dependent launches (sm_90), for the kernels of
// attention/cuda and model/cuda.
//
// launch_programmatic starts a kernel with programmatic stream serialization: its blocks may be
// scheduled once every block of the kernel before it in the stream has run
// allow_dependent_launch() or exited, so its launch and start overlap that kernel's tail. Such
// a kernel must call wait_for_previous_grid() (which returns once the earlier grid has
// completed and its writes are visible) before it reads or writes anything an earlier kernel
// writes, and on every path before it exits, so that its own completion implies the earlier
// grid's for the kernel after it. Where the previous work is not a kernel, or before sm_90, the
// launch serialises as usual and both device calls are no-ops. CUDA graphs captured from the
// stream keep the programmatic edges.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "packserve/attention/cuda/cuda_check.h"
#include "packserve/common/status.h"

namespace packserve::attention::cuda {

// Returns once the previous grid in the stream has completed and its writes are visible.
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel in the stream be scheduled once every block of this grid has run it.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// Launches `kernel` (programmatically when `programmatic`, else as <<<>>> would); returns the
// launch's error.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(bool programmatic, void (*kernel)(Params...), dim3 grid, dim3 block,
                          size_t smem_bytes, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = programmatic ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
Status launch_programmatic(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                           cudaStream_t stream, Args&&... args) {
  PS_CUDA_RETURN_IF_ERROR(
      launch_kernel(true, kernel, grid, block, smem_bytes, stream, std::forward<Args>(args)...));
  return ok_status();
}

}  // namespace packserve::attention::cuda
