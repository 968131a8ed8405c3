// backend_factory.h: one place that turns "--backend cpu|cuda|auto" plus the loaded weights
// into a model::ForwardBackend (issue 4 "Forward", issue 5 "Server"), used by `packserve
// generate`, `serve` and `bench --in-process` (docs/engine.md "Choosing the backend").
//
//   cpu   CpuForwardBackend (f32, OpenBLAS); always available.
//   cuda  CudaForwardBackend (bf16, cuBLAS, the attention engine's kernels). Errors:
//         kUnimplemented when this build has no CUDA (configure with -DPACKSERVE_CUDA=ON);
//         kFailedPrecondition when the build has CUDA but no device is visible.
//   auto  cuda when this build has CUDA and a device is visible, else cpu.
//
// KV pool sizing (num_pages = 0, the default): on the CPU, cpu_default_num_pages whatever the
// kv_cache_dtype (a page count: kFp8E4m3 keeps the pages and takes a quarter of the f32
// bytes, cpu_kv_page_bytes below); on the GPU,
// what fits in gpu_memory_utilization x total device memory after everything else, as vLLM's
// --gpu-memory-utilization (gpu_kv_pages_for_memory below; docs/forward-cuda.md "KV pool").
// A num_pages > 0 is used as given on both.
//
// This library (packserve_model_factory) sits above packserve_model and, in a CUDA build,
// packserve_model_cuda; the header includes no CUDA header.
// Thread-safety: the functions are pure or query the device; call from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "packserve/attention/plan.h"
#include "packserve/common/status.h"
#include "packserve/model/config.h"
#include "packserve/model/forward.h"
#include "packserve/model/gemm_tuning.h"
#include "packserve/model/kv_cache_dtype.h"
#include "packserve/model/weight_quantization.h"
#include "packserve/model/weights.h"

namespace packserve::model {

enum class BackendKind { kCpu, kCuda, kAuto };

// "cpu" | "cuda" | "auto"; kInvalidArgument naming the choices otherwise.
Result<BackendKind> parse_backend_kind(std::string_view name);
// "heuristic" | "bucket" | "shape" (gemm_tuning.h); kInvalidArgument naming the choices.
Result<GemmTuning> parse_gemm_tuning(std::string_view name);
// "none" | "fp8" (weight_quantization.h); kInvalidArgument naming the choices.
Result<WeightQuantization> parse_weight_quantization(std::string_view name);
// "auto" | "fp8" | "fp8_e4m3" (kv_cache_dtype.h; vLLM's names, fp8 = fp8_e4m3);
// kInvalidArgument naming the choices.
Result<KvCacheDtype> parse_kv_cache_dtype(std::string_view name);

struct BackendOptions {
  BackendKind kind = BackendKind::kCpu;
  const ModelWeights* weights = nullptr;  // required; must outlive the call only
  int32_t num_pages = 0;                  // KV pool pages; 0: the default rule above
  int32_t page_size = 16;                 // tokens per KV page
  int32_t cpu_default_num_pages = 2048;   // num_pages = 0 on the CPU
  int num_threads = 1;                    // CPU attention executor threads
  int sample_threads = 0;                 // CPU: threads drawing sampled rows (0: auto)
  attention::PlanOptions plan;            // attention policy etc., both backends
  // CUDA only.
  int cuda_device = 0;  // device ordinal (of rank 0)
  // Tensor-parallel ranks on devices cuda_device .. + tensor_parallel - 1 (model/
  // tensor_parallel.h): each device's memory is sized for its share of the model.
  int tensor_parallel = 1;
  double gpu_memory_utilization = 0.9;  // in (0, 1]: share of total device memory to use
  GemmTuning gemm_tuning = GemmTuning::kHeuristic;
  // The layers' matrices in bf16 or float8 (CudaForwardOptions::quantization); kFp8 with the
  // cpu backend is kInvalidArgument.
  WeightQuantization quantization = WeightQuantization::kNone;
  // Both backends: the KV pool's elements in the compute type (bf16 on cuda, f32 on cpu) or
  // float8 e4m3 with the layers' k_scale / v_scale (CudaForwardOptions::kv_cache_dtype, which
  // sizes the GPU pool through gpu_kv_page_bytes; CpuForwardOptions::kv_cache_dtype).
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
  int max_graph_rows = 512;     // CudaStepOptions::max_graph_rows (0: no CUDA graphs)
  int graph_capture_after = 1;  // CudaStepOptions::graph_capture_after (>= 1)
  // Query rows of the largest step (the engine's max_num_batched_tokens, at least its
  // max_num_running_requests): sizes the activation scratch, the plan capacity and, through
  // them, the KV pool.
  int32_t max_batch_rows = 2048;
  int32_t max_sampling_rows = 256;  // rows that sample in one step (logits buffer)
};

struct CreatedBackend {
  std::unique_ptr<ForwardBackend> backend;
  KvPoolShape pool;     // the pool the backend was created with: give it to EngineConfig::kv
  std::string summary;  // one line for the log: backend, pool and, on the GPU, memory budget
};

// True when this binary was built with the CUDA backend.
bool cuda_backend_compiled();
// True when cuda_backend_compiled() and at least one CUDA device is visible.
bool cuda_device_available();

// Creates the backend. Errors: kInvalidArgument (no weights, bad page_size / num_pages /
// gpu_memory_utilization, or what the backend's create() rejects, naming the field);
// kUnimplemented / kFailedPrecondition as above for cuda; kResourceExhausted when the KV pool
// sized from GPU memory would have fewer than one page (the message gives the budget).
Result<CreatedBackend> make_forward_backend(const BackendOptions& options);

// Bytes of one KV page of the CPU backend: k and v, every layer, f32 (kAuto) or e4m3 bytes
// (kFp8E4m3): 2 x num_layers x page_size x kv_size x cpu_kv_cache_element_bytes. The CPU
// pool takes num_pages of them (CpuForwardBackend::kv_pool_bytes); the summary line says so.
size_t cpu_kv_page_bytes(const ModelConfig& config, int32_t page_size,
                         KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto);

// --- GPU KV sizing, a pure function (tested on the CPU) ---------------------------------

// Device bytes the CUDA backend will take for a model, besides the KV pool: bf16 matrices
// (embedding, untied LM head, per layer qkv, o, gate_up, down; with kFp8 the layers' in e4m3
// bytes, each with an f32 scale), f32 vectors (norms, biases), activations of max_batch_rows
// (with kFp8 also a quantized GEMM input, its rows' maxima and its scale), logits of
// max(max_sampling_rows, kGpuMinLogitsRows) rows, plus a fixed reserve for the attention workspace,
// cuBLAS, the float8 staging of the weight upload and allocator slack (kGpuFixedReserveBytes).
inline constexpr size_t kGpuFixedReserveBytes = size_t{1} << 30;  // 1 GiB
// CudaForwardBackend::kMinLogitsRows: its logits buffer holds at least this many rows.
inline constexpr int32_t kGpuMinLogitsRows = 64;
size_t gpu_non_kv_bytes(const ModelConfig& config, int32_t max_batch_rows,
                        int32_t max_sampling_rows,
                        WeightQuantization quantization = WeightQuantization::kNone);
// Bytes of one KV page on the GPU: k and v, every layer, bf16 (kAuto) or e4m3 (kFp8E4m3) bytes.
size_t gpu_kv_page_bytes(const ModelConfig& config, int32_t page_size,
                         KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto);
// Bytes of the attention workspace that grow with the pool, per page: the backend plans for two
// page ids per page (max_batch_page_ids), and each page id may become a work item, with its
// plan-buffer entries (attention::kPlanInt32PerItemRow, plan_buffer.h) and a partial state per
// query head (o in bf16 and its f32 lse, workspace.h). Small beside a page of a large model
// (llama-3.1-8b: 16.4 KiB against 2 MiB), not beside a tiny model's page of a few tokens.
size_t gpu_page_workspace_bytes(const ModelConfig& config);

struct GpuKvSizing {
  int32_t num_pages = 0;
  size_t budget_bytes = 0;  // utilization x total - (total - free) - non-KV bytes, >= 0
};
// num_pages = floor(budget / (KV page bytes of options.kv_cache_dtype + page workspace bytes)),
// capped at INT32_MAX, where budget = gpu_memory_utilization * total_bytes - (total_bytes -
// free_bytes) - non-KV bytes (memory already used by this or other processes counts against
// the share).
// Errors: kInvalidArgument for utilization outside (0, 1] or free > total; kResourceExhausted
// when not one page fits, naming the numbers and the flags that change them.
Result<GpuKvSizing> gpu_kv_pages_for_memory(const ModelConfig& config, size_t free_bytes,
                                            size_t total_bytes, const BackendOptions& options);

}  // namespace packserve::model
