// device_runner.h: whole-batch helpers for the command line (`packserve attention verify
// --device cuda`, `packserve attention bench`): copy a built batch to the current device, run a
// plan there, time it, and measure the device's ceilings in the same process. Host-only
// interface (no CUDA header), so cli/ can call it.
//
//   run_plan_on_device    a warm-up run, then one poisoned run whose output (f32) and kernel
//                         time (CUDA events around run_cuda, L2 warm) it returns
//   device_grid_ctas      the persistent grid of the current device for a layout's head_dim
//                         and dtype: SMs x CTAs per SM (kernel_occupancy of run_cuda.h), the
//                         DeviceShape::num_ctas its plans are made for
//   bench_plan_on_device  median of `reps` eager launches (each after an L2 flush) and the
//                         median per call of CUDA-graph replays of 10 back-to-back calls, plus
//                         the ceilings: device-to-device copy bandwidth (bytes read + written,
//                         1 GiB) and cuBLAS bf16 GEMM 8192^3 on random data.
// Errors: the executor's (run_cuda.h, workspace.h) and kInternal for CUDA/cuBLAS failures.
// Thread-safety: uses the current device; one call at a time.
#pragma once

#include <string>
#include <vector>

#include "packserve/attention/batch_spec.h"
#include "packserve/attention/plan.h"
#include "packserve/common/status.h"

namespace packserve::attention::cuda {

Result<int> device_grid_ctas(const BatchLayout& layout);

struct DeviceRun {
  std::vector<float> out;  // [total_rows, num_qo_heads, head_dim]
  double kernel_ms = 0;    // persistent + merge kernels, one launch after a warm-up
  std::string device_name;
};
Result<DeviceRun> run_plan_on_device(const Plan& plan, const BatchData& data);

struct DeviceBench {
  double eager_ms = 0;       // median of eager launches after an L2 flush
  double graph_ms = 0;       // median per call of graph replays
  double copy_gbps = 0;      // measured device-to-device copy bandwidth
  double matmul_tflops = 0;  // measured cuBLAS bf16 GEMM rate
  std::string device_name;
};
Result<DeviceBench> bench_plan_on_device(const Plan& plan, const BatchData& data, int reps = 20);

}  // namespace packserve::attention::cuda
