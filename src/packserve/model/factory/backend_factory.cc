// backend_factory.cc: see backend_factory.h. The CUDA branch compiles only with
// PACKSERVE_HAVE_CUDA (exported by packserve_attention_cuda through packserve_model_cuda).
#include "packserve/model/factory/backend_factory.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>

#include "packserve/attention/plan_buffer.h"
#include "packserve/model/forward_batch.h"
#include "packserve/model/forward_cpu.h"
#include "packserve/model/tensor_parallel.h"

#ifdef PACKSERVE_HAVE_CUDA
#include "packserve/model/cuda/device_query.h"
#include "packserve/model/cuda/forward_cuda.h"
#endif

namespace packserve::model {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

std::string gib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(bytes) / double(1 << 30));
  return buf;
}

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MiB", static_cast<double>(bytes) / double(1 << 20));
  return buf;
}

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

Result<CreatedBackend> make_cpu(const BackendOptions& o) {
  KvPoolShape pool{o.num_pages > 0 ? o.num_pages : o.cpu_default_num_pages, o.page_size};
  CpuForwardOptions cpu;
  cpu.num_threads = o.num_threads;
  cpu.sample_threads = o.sample_threads;
  cpu.plan = o.plan;
  cpu.kv_cache_dtype = o.kv_cache_dtype;
  PS_ASSIGN_OR_RETURN(auto backend, CpuForwardBackend::create(*o.weights, pool, cpu));
  CreatedBackend made;
  const bool fp8 = o.kv_cache_dtype == KvCacheDtype::kFp8E4m3;
  made.summary = "backend cpu: " + str(pool.num_pages) + " KV pages x " + str(pool.page_size) +
                 " tokens (" + (fp8 ? "fp8_e4m3" : "f32") + ", " + mib(backend->kv_pool_bytes()) +
                 "), " + str(o.num_threads) + " attention thread(s)";
  made.backend = std::move(backend);
  made.pool = pool;
  return made;
}

#ifdef PACKSERVE_HAVE_CUDA
Result<CreatedBackend> make_cuda(const BackendOptions& o) {
  if (cuda::cuda_device_count() == 0) {
    return failed_precondition(
        "--backend cuda: no CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES), "
        "or use --backend cpu");
  }
  // Each rank holds its share (shard_config) of every layer and the whole embedding and LM
  // head; the device with the least free memory sizes the pool.
  auto local = shard_config(o.weights->config, o.tensor_parallel);
  if (!local.ok()) return invalid_argument("--tensor-parallel-size: " + local.status().message());
  const ModelConfig& config = *local;
  KvPoolShape pool{o.num_pages, o.page_size};
  std::string sizing;
  if (pool.num_pages <= 0) {
    auto memory = cuda::cuda_device_memory(o.cuda_device);
    for (int r = 1; r < o.tensor_parallel && memory.ok(); ++r) {
      auto other = cuda::cuda_device_memory(o.cuda_device + r);
      if (!other.ok() || other->free_bytes < memory->free_bytes) memory = other;
    }
    if (!memory.ok()) {
      return Status(memory.status().code(), "--backend cuda: " + memory.status().message());
    }
    PS_ASSIGN_OR_RETURN(GpuKvSizing sized, gpu_kv_pages_for_memory(config, memory->free_bytes,
                                                                   memory->total_bytes, o));
    pool.num_pages = sized.num_pages;
    sizing = " (from --gpu-memory-utilization " + std::to_string(o.gpu_memory_utilization) +
             ": free " + gib(memory->free_bytes) + " of " + gib(memory->total_bytes) +
             ", KV budget " + gib(sized.budget_bytes) + ")";
  }
  CudaForwardOptions cuda_options;
  cuda_options.device = o.cuda_device;
  cuda_options.tensor_parallel = o.tensor_parallel;
  cuda_options.max_batch_rows = o.max_batch_rows;
  cuda_options.max_sampling_rows = o.max_sampling_rows;  // the logits gpu_non_kv_bytes counts
  static_assert(kGpuMinLogitsRows == CudaForwardBackend::kMinLogitsRows);
  // Shared prefix pages appear once per request that reads them, so a step's page_ids may
  // exceed num_pages; twice the pool is cheap (int32 entries) and covers heavy sharing.
  const int64_t page_ids = 2 * static_cast<int64_t>(pool.num_pages);
  cuda_options.max_batch_page_ids =
      static_cast<int>(std::min<int64_t>(page_ids, std::numeric_limits<int32_t>::max()));
  cuda_options.plan = o.plan;
  cuda_options.gemm_tuning = o.gemm_tuning;
  cuda_options.quantization = o.quantization;
  cuda_options.kv_cache_dtype = o.kv_cache_dtype;
  cuda_options.step.max_graph_rows = o.max_graph_rows;
  cuda_options.step.graph_capture_after = o.graph_capture_after;
  auto created = CudaForwardBackend::create(*o.weights, pool, cuda_options);
  if (!created.ok()) {
    return Status(created.status().code(), "--backend cuda: " + created.status().message());
  }
  CreatedBackend made;
  const std::string devices = o.tensor_parallel == 1
                                  ? "device " + str(o.cuda_device)
                                  : "devices " + str(o.cuda_device) + ".." +
                                        str(o.cuda_device + o.tensor_parallel - 1) +
                                        ", tensor parallel " + str(o.tensor_parallel);
  // The KV element type only when it is not the default bf16.
  const std::string kv_dtype = o.kv_cache_dtype == KvCacheDtype::kFp8E4m3 ? " (fp8_e4m3)" : "";
  made.summary = "backend cuda (" + devices + "): weights " + gib((*created)->weight_bytes()) +
                 ", KV pool " + gib((*created)->kv_pool_bytes()) + kv_dtype + " = " +
                 str(pool.num_pages) + " pages x " + str(pool.page_size) + " tokens" + sizing;
  made.backend = std::move(created).value();
  made.pool = pool;
  return made;
}
#endif

}  // namespace

Result<BackendKind> parse_backend_kind(std::string_view name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  if (name == "auto") return BackendKind::kAuto;
  return invalid_argument("backend '" + std::string(name) + "': expected cpu, cuda or auto");
}

Result<WeightQuantization> parse_weight_quantization(std::string_view name) {
  if (name == "none") return WeightQuantization::kNone;
  if (name == "fp8") return WeightQuantization::kFp8;
  return invalid_argument("quantization '" + std::string(name) + "': expected none or fp8");
}

Result<KvCacheDtype> parse_kv_cache_dtype(std::string_view name) {
  if (name == "auto") return KvCacheDtype::kAuto;
  if (name == "fp8" || name == "fp8_e4m3") return KvCacheDtype::kFp8E4m3;
  return invalid_argument("kv_cache_dtype '" + std::string(name) +
                          "': expected auto, fp8 or fp8_e4m3");
}

Result<GemmTuning> parse_gemm_tuning(std::string_view name) {
  if (name == "bucket") return GemmTuning::kPerBucket;
  if (name == "shape") return GemmTuning::kPerShape;
  if (name == "heuristic") return GemmTuning::kHeuristic;
  return invalid_argument("gemm tuning '" + std::string(name) +
                          "': expected bucket, shape or heuristic");
}

bool cuda_backend_compiled() {
#ifdef PACKSERVE_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_device_available() {
#ifdef PACKSERVE_HAVE_CUDA
  return cuda::cuda_device_count() > 0;
#else
  return false;
#endif
}

size_t gpu_non_kv_bytes(const ModelConfig& c, int32_t max_batch_rows, int32_t max_sampling_rows,
                        WeightQuantization quantization) {
  const bool fp8 = quantization == WeightQuantization::kFp8;
  const size_t H = static_cast<size_t>(c.hidden_size), I = static_cast<size_t>(c.intermediate_size),
               V = static_cast<size_t>(c.vocab_size), Q = static_cast<size_t>(c.q_size()),
               KV = static_cast<size_t>(c.kv_size()), D = static_cast<size_t>(c.head_dim),
               L = static_cast<size_t>(c.num_layers);
  // As CudaForwardBackend lays them out (forward_cuda.cu setup): bf16 matrices aligned to 128
  // elements, e4m3 ones to 256 bytes, vectors to 64 elements.
  size_t mat = align_up(V * H, 128) * (c.tie_word_embeddings ? 1 : 2), mat8 = 0;
  size_t vec = align_up(H, 64);
  const std::pair<size_t, size_t> matrices[] = {{Q + 2 * KV, H}, {H, Q}, {2 * I, H}, {H, I}};
  for (size_t l = 0; l < L; ++l) {
    for (const auto& [rows, cols] : matrices) {
      if (fp8) {
        mat8 += align_up(rows * cols, 256);
        vec += 64;  // its scale
      } else {
        mat += align_up(rows * cols, 128);
      }
    }
    vec += 2 * align_up(H, 64) + (c.qkv_bias ? align_up(Q + 2 * KV, 64) : 0) +
           (c.qk_norm ? 2 * align_up(D, 64) : 0);
  }
  const size_t R = static_cast<size_t>(std::max(max_batch_rows, 1));
  size_t activations = R * (H * 4 + (Q + 2 * KV) * 4 + H * 2 + 2 * Q * 2 + 2 * I * 2 + I * 2);
  if (fp8) activations += R * (std::max({H, Q, I}) + 4) + 4;
  const size_t logits = static_cast<size_t>(std::max(max_sampling_rows, kGpuMinLogitsRows)) * V * 4;
  return mat * 2 + mat8 + vec * 4 + activations + logits + kGpuFixedReserveBytes;
}

namespace {

// K and V of every layer for page_size tokens, element_bytes each.
size_t kv_page_bytes(const ModelConfig& c, int32_t page_size, size_t element_bytes) {
  return 2 * static_cast<size_t>(c.num_layers) * static_cast<size_t>(page_size) *
         static_cast<size_t>(c.kv_size()) * element_bytes;
}

}  // namespace

size_t gpu_kv_page_bytes(const ModelConfig& c, int32_t page_size, KvCacheDtype kv_cache_dtype) {
  return kv_page_bytes(c, page_size, kv_cache_element_bytes(kv_cache_dtype));
}

size_t cpu_kv_page_bytes(const ModelConfig& c, int32_t page_size, KvCacheDtype kv_cache_dtype) {
  return kv_page_bytes(c, page_size, cpu_kv_cache_element_bytes(kv_cache_dtype));
}

size_t gpu_page_workspace_bytes(const ModelConfig& c) {
  const size_t per_page_id =
      attention::kPlanInt32PerItemRow * sizeof(int32_t) +
      static_cast<size_t>(c.num_qo_heads) * (static_cast<size_t>(c.head_dim) * 2 + sizeof(float));
  return 2 * per_page_id;
}

Result<GpuKvSizing> gpu_kv_pages_for_memory(const ModelConfig& config, size_t free_bytes,
                                            size_t total_bytes, const BackendOptions& o) {
  const double u = o.gpu_memory_utilization;
  if (!(u > 0.0 && u <= 1.0)) {
    return invalid_argument("--gpu-memory-utilization = " + std::to_string(u) +
                            ": expected in (0, 1]");
  }
  if (free_bytes > total_bytes) {
    return invalid_argument("free device memory " + str(static_cast<int64_t>(free_bytes)) +
                            " B exceeds the total " + str(static_cast<int64_t>(total_bytes)) +
                            " B");
  }
  if (o.page_size < 1) {
    return invalid_argument("page_size = " + str(o.page_size) + ": expected >= 1");
  }
  const double share = u * static_cast<double>(total_bytes);
  const double used = static_cast<double>(total_bytes - free_bytes);
  const size_t non_kv =
      gpu_non_kv_bytes(config, o.max_batch_rows, o.max_sampling_rows, o.quantization);
  const double budget = std::floor(share - used - static_cast<double>(non_kv));
  const size_t page_bytes =
      gpu_kv_page_bytes(config, o.page_size, o.kv_cache_dtype) + gpu_page_workspace_bytes(config);
  if (budget < static_cast<double>(page_bytes) || page_bytes == 0) {
    return resource_exhausted(
        "the KV pool gets no page on the GPU: --gpu-memory-utilization " + std::to_string(u) +
        " x " + gib(total_bytes) + " total, minus " + gib(total_bytes - free_bytes) +
        " already in use, minus " + gib(non_kv) +
        " for weights, activations and reserve, leaves less than one page (" +
        str(static_cast<int64_t>(page_bytes)) +
        " B); raise --gpu-memory-utilization, lower --max-num-batched-tokens, or free memory");
  }
  GpuKvSizing sized;
  sized.budget_bytes = static_cast<size_t>(budget);
  sized.num_pages = static_cast<int32_t>(std::min<size_t>(
      sized.budget_bytes / page_bytes, static_cast<size_t>(std::numeric_limits<int32_t>::max())));
  return sized;
}

Result<CreatedBackend> make_forward_backend(const BackendOptions& options) {
  if (options.weights == nullptr) return invalid_argument("BackendOptions.weights: not set");
  if (options.num_pages < 0) {
    return invalid_argument("num_pages = " + str(options.num_pages) +
                            ": expected >= 1, or 0 for the default");
  }
  PS_RETURN_IF_ERROR(validate_kv_pool_shape(KvPoolShape{1, options.page_size}));
  BackendKind kind = options.kind;
  if (kind == BackendKind::kAuto) {
    kind = cuda_device_available() ? BackendKind::kCuda : BackendKind::kCpu;
  }
  if (kind == BackendKind::kCpu && options.quantization != WeightQuantization::kNone) {
    return invalid_argument(
        "--quantization fp8: needs --backend cuda (the cpu backend computes in f32 from the "
        "checkpoint's values)");
  }
  if (kind == BackendKind::kCpu && options.tensor_parallel != 1) {
    return invalid_argument("--tensor-parallel-size = " + str(options.tensor_parallel) +
                            ": needs --backend cuda (the cpu backend runs on one device)");
  }
  if (kind == BackendKind::kCpu) return make_cpu(options);
#ifdef PACKSERVE_HAVE_CUDA
  return make_cuda(options);
#else
  return unimplemented(
      "--backend cuda: this packserve was built without CUDA; reconfigure with "
      "-DPACKSERVE_CUDA=ON (nvcc at /usr/local/cuda), or use --backend cpu");
#endif
}

}  // namespace packserve::model
