// backend_flags.cc: see backend_flags.h.
#include "packserve/cli/backend_flags.h"

#include <algorithm>

#include "packserve/common/log.h"

namespace packserve::cli {

void add_backend_flags(CLI::App& cmd, BackendFlags& flags, const std::string& help_prefix) {
  cmd.add_option("--backend", flags.backend,
                 help_prefix +
                     "forward backend: cpu | cuda | auto (auto: cuda when built with CUDA and a "
                     "device is visible, else cpu)")
      ->capture_default_str();
  cmd.add_option("--gpu-memory-utilization", flags.gpu_memory_utilization,
                 help_prefix +
                     "cuda: share of the GPU's memory for weights, activations and the KV pool; "
                     "sizes the pool when --num-pages is 0")
      ->capture_default_str();
  cmd.add_option("--cuda-device", flags.cuda_device,
                 help_prefix + "cuda: device ordinal (with tensor parallelism: the first)")
      ->capture_default_str();
  cmd.add_option("--tensor-parallel-size", flags.tensor_parallel_size,
                 help_prefix +
                     "cuda: GPUs the model is cut over (attention heads and MLP width split, "
                     "NCCL all-reduce; needs libnccl.so.2 on the library path when > 1)")
      ->capture_default_str();
  cmd.add_option("--gemm-tuning", flags.gemm_tuning,
                 help_prefix +
                     "cuda: how the cuBLASLt algorithm of each decode-sized GEMM (<= 512 rows) "
                     "is chosen: heuristic (cuBLASLt's first pick: no timing, reproducible "
                     "across processes), bucket (timed once per bucket of row counts: 1..16, "
                     "then multiples of 16), shape (timed at every new row count); a timed "
                     "choice stalls the step that meets a new shape")
      ->capture_default_str();
  cmd.add_option("--quantization", flags.quantization,
                 help_prefix +
                     "cuda: the layers' weight matrices: none (bf16) or fp8 (float8 e4m3, a "
                     "scale per matrix; steps of up to 16 rows multiply them with bf16 inputs, "
                     "larger ones quantize each GEMM input at run time with a scale per step; "
                     "the embedding and the LM head stay bf16; needs compute capability 8.9+)")
      ->capture_default_str();
  cmd.add_option("--kv-cache-dtype", flags.kv_cache_dtype,
                 help_prefix +
                     "KV cache element type: auto (bf16 on cuda, f32 on cpu) | fp8 | fp8_e4m3 "
                     "(float8 e4m3 with the checkpoint's per-layer K/V scales, else 1, "
                     "saturating at +-448 x the scale; cuda: half the KV bytes per token, about "
                     "twice the pages, needs compute capability 8.9+; cpu: a quarter of the "
                     "bytes, the same --num-pages)")
      ->capture_default_str();
  cmd.add_option("--max-graph-rows", flags.max_graph_rows,
                 help_prefix +
                     "cuda: steps of at most this many rows run as replays of a CUDA graph "
                     "captured at the first step of their shape; 0: every step eager")
      ->capture_default_str();
  cmd.add_option("--graph-capture-after", flags.graph_capture_after,
                 help_prefix +
                     "cuda: a step shape is captured as a CUDA graph at its N-th step, the "
                     "ones before run eagerly (2 or more: shapes met once, as speculative "
                     "decoding's varying row counts, cost no capture)")
      ->capture_default_str();
}

Result<model::CreatedBackend> make_engine_backend(const BackendFlags& flags,
                                                  const model::ModelWeights& weights,
                                                  int num_threads, int32_t cpu_default_num_pages,
                                                  engine::EngineConfig& config) {
  auto kind = model::parse_backend_kind(flags.backend);
  if (!kind.ok()) return invalid_argument("--backend: " + kind.status().message());
  auto tuning = model::parse_gemm_tuning(flags.gemm_tuning);
  if (!tuning.ok()) return invalid_argument("--gemm-tuning: " + tuning.status().message());
  auto quantization = model::parse_weight_quantization(flags.quantization);
  if (!quantization.ok()) {
    return invalid_argument("--quantization: " + quantization.status().message());
  }
  auto kv_cache_dtype = model::parse_kv_cache_dtype(flags.kv_cache_dtype);
  if (!kv_cache_dtype.ok()) {
    return invalid_argument("--kv-cache-dtype: " + kv_cache_dtype.status().message());
  }
  if (flags.max_graph_rows < 0) {
    return invalid_argument("--max-graph-rows: expected >= 0 (0: no CUDA graphs), got " +
                            std::to_string(flags.max_graph_rows));
  }
  if (flags.graph_capture_after < 1) {
    return invalid_argument("--graph-capture-after: expected >= 1, got " +
                            std::to_string(flags.graph_capture_after));
  }
  model::BackendOptions options;
  options.kind = *kind;
  options.weights = &weights;
  options.num_pages = config.kv.num_pages;
  options.page_size = config.kv.page_size;
  options.cpu_default_num_pages = cpu_default_num_pages;
  options.num_threads = num_threads;
  options.sample_threads = config.num_sampler_threads;
  options.plan = config.plan;
  options.cuda_device = flags.cuda_device;
  options.tensor_parallel = flags.tensor_parallel_size;
  options.gpu_memory_utilization = flags.gpu_memory_utilization;
  options.gemm_tuning = *tuning;
  options.quantization = *quantization;
  options.kv_cache_dtype = *kv_cache_dtype;
  options.max_graph_rows = flags.max_graph_rows;
  options.graph_capture_after = flags.graph_capture_after;
  // A step has at most max_num_batched_tokens rows (sched/batch.h); the running-request cap
  // bounds the rows that sample.
  options.max_batch_rows =
      std::max(config.scheduler.max_num_batched_tokens, config.scheduler.max_num_running_requests);
  options.max_sampling_rows =
      std::min(config.scheduler.max_num_running_requests, options.max_batch_rows);
  PS_ASSIGN_OR_RETURN(model::CreatedBackend made, model::make_forward_backend(options));
  config.kv.num_pages = made.pool.num_pages;
  PS_LOG_INFO("cli", "{}", made.summary);
  return made;
}

}  // namespace packserve::cli
