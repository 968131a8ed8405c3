// backend_flags.h: the flags that choose the forward backend, shared by `packserve generate`,
// `serve` and `bench --in-process` (docs/engine.md "Choosing the backend"):
//   --backend cpu|cuda|auto        default cpu (the embedded default and what the CPU tests
//                                  expect); auto = cuda when built with CUDA and a device is
//                                  visible, else cpu
//   --gpu-memory-utilization F     share of the GPU's memory for weights + KV + activations
//                                  (default 0.9); sizes the KV pool when --num-pages is 0
//   --cuda-device N                CUDA device ordinal (default 0)
//   --tensor-parallel-size N       cut the model over N GPUs (devices --cuda-device ..
//                                  + N - 1; default 1; docs/forward-cuda.md "Tensor parallelism")
//   --gemm-tuning heuristic|bucket|shape
//                                  how the GEMM algorithm of each decode-sized row count is
//                                  chosen (default heuristic; model/cuda/gemm.h)
//   --quantization none|fp8        the layers' weights in bf16 or float8 e4m3 (cuda only;
//                                  default none; docs/forward-cuda.md "Float8 weights")
//   --kv-cache-dtype auto|fp8|fp8_e4m3
//                                  the KV pool's elements in the compute type (bf16 on
//                                  cuda, f32 on cpu) or float8 e4m3 (both backends; default
//                                  auto; model/kv_cache_dtype.h)
//   --max-graph-rows N             steps of at most N rows run as CUDA graph replays (default
//                                  512; 0: every step eager)
//   --graph-capture-after N        a step shape is captured at its N-th step (default 1)
// and the one call that turns them into a backend for an Engine (model/factory).
// Thread-safety: call from one thread at start-up.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "packserve/common/status.h"
#include "packserve/engine/engine.h"
#include "packserve/model/factory/backend_factory.h"
#include "packserve/model/weights.h"

namespace packserve::cli {

struct BackendFlags {
  std::string backend = "cpu";
  double gpu_memory_utilization = 0.9;
  int cuda_device = 0;
  int tensor_parallel_size = 1;
  std::string gemm_tuning = "heuristic";
  std::string quantization = "none";
  std::string kv_cache_dtype = "auto";
  int max_graph_rows = 512;
  int graph_capture_after = 1;
};

// Registers the flags; help texts start with help_prefix (e.g. "--in-process: ").
void add_backend_flags(CLI::App& cmd, BackendFlags& flags, const std::string& help_prefix = "");

// Creates the backend for `weights` with config.kv.num_pages (0: the factory's default rule;
// cpu_default_num_pages on the CPU), config.kv.page_size, config.plan and the step budget of
// config.scheduler; then sets config.kv.num_pages to the pool actually created, so the engine's
// page table matches the backend's pool. Logs the factory's summary line. Errors: as
// make_forward_backend, --backend, --gemm-tuning, --quantization and --kv-cache-dtype naming
// the choices.
Result<model::CreatedBackend> make_engine_backend(const BackendFlags& flags,
                                                  const model::ModelWeights& weights,
                                                  int num_threads, int32_t cpu_default_num_pages,
                                                  engine::EngineConfig& config);

}  // namespace packserve::cli
