// forward_cuda.h: the CUDA forward backend (issue 4 "Forward and sampling"): bf16 weights
// uploaded once, cuBLASLt bf16 GEMMs with f32 accumulation (gemm.h; or float8 e4m3 layer
// matrices, CudaForwardOptions::quantization), the attention engine's persistent kernels
// (attention/cuda/run_cuda.h) with ONE plan per step, and the kernels of ops.h. Computes
// what CpuForwardBackend (forward_cpu.h) computes, in bf16:
//   validate (forward_batch.h) -> make_plan -> upload the plan into the Workspace -> page_copies
//   (device copies) -> upload the step's int32 metadata (one copy) -> embedding gather (f32 x)
//   and the step's RoPE cos/sin table -> per layer:
//        h = RMSNorm(x) (bf16) -> qkv = h Wqkv^T (f32) -> qkv_epilogue: + bias (Qwen2),
//        per-head q/k RMSNorm (Qwen3), RoPE at each row's position, q -> bf16, k/v -> their
//        page slots (bf16) -> run_cuda(plan) -> x += attn Wo^T (f32, in the GEMM)
//        -> h = RMSNorm(x) -> gate_up = h Wgu^T (bf16) -> act = silu(g) * u (bf16)
//        -> x += act Wd^T (f32, in the GEMM)
//   -> final RMSNorm of the sampling rows only -> logits = h Wlm^T (f32) -> the logits of the
//   kOutputLogits rows to the host; of the kOutputArgmax rows only their argmax (argmax_rows,
//   ops.h) and of the kOutputSample rows only their drawn token, logprob and top_logprobs
//   (sample_rows, ops.h; the rows it leaves to the host are drawn there from their logits),
//   so a step without captured logits copies at most 168 bytes per row instead of
//   4 * vocab_size.
// The device part (embedding to LM head) of a step of <= CudaStepOptions::max_graph_rows rows
// replays a CUDA graph captured for the step's shape (forward_step.cu, docs/forward-cuda.md).
// Precision: weights, K/V pages and GEMM inputs bf16; the residual stream x and every GEMM
// accumulation f32; norms sum in f32; RoPE angles and cos/sin in double (as the CPU backend).
// KV pool: per layer k and v of [num_pages, page_size, num_kv_heads, head_dim] bf16, zeroed at
// creation.
// Failure contract: every check (batch, pool, capacity, plan upload) runs before anything is
// written, so kInvalidArgument / kResourceExhausted leave the KV pool unchanged; a kInternal
// (a device fault) may leave the pages of this batch's rows partly written.
// Thread-safety: one thread drives a backend; it owns its CUDA stream, cuBLASLt handle and the
// logits copier's worker threads (used only inside forward()).
// The header includes no CUDA header (STYLE.md §1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "packserve/attention/plan.h"
#include "packserve/common/status.h"
#include "packserve/model/cuda/skinny_gemm.h"
#include "packserve/model/forward.h"
#include "packserve/model/gemm_tuning.h"
#include "packserve/model/kv_cache_dtype.h"
#include "packserve/model/weight_quantization.h"
#include "packserve/model/weights.h"

namespace packserve::model {

struct CudaStepOptions {
  // CUDA graphs: a step of at most max_graph_rows rows runs as one replay of a graph captured
  // for its shape (rows, requests, sampling rows) the first time that shape is seen; the plan,
  // the metadata and the page copies are uploaded before the replay. 0 turns graphs off.
  int max_graph_rows = 512;
  int max_cuda_graphs = 128;  // captured shapes kept (>= 1); the least recently used is dropped
  // A shape is captured at its graph_capture_after-th step (>= 1); the steps of it before run
  // eagerly, so that shapes met once or twice (speculative decoding's varying row counts)
  // cost no capture.
  int graph_capture_after = 1;
  // Records a CUDA event after every op for last_step_profile().op_gpu_ms (eager steps only:
  // graphs are not used while it is on); costs ~1 us of host time per op.
  bool profile_ops = false;
};

struct CudaForwardOptions {
  int device = 0;  // CUDA device ordinal (tensor parallelism: of rank 0)
  // Ranks the model is cut over (model/tensor_parallel.h), rank r on device device + r; > 1
  // needs NCCL (cuda/tp_group.h). docs/forward-cuda.md "Tensor parallelism".
  int tensor_parallel = 1;
  // Tests on one GPU: every rank on `device`, summed by TpGroup::create_on_one_device instead of
  // NCCL; needs step.max_graph_rows = 0 (its all-reduce cannot be captured).
  bool tensor_parallel_on_one_device = false;
  int max_batch_rows = 8192;   // query rows (tokens) per step: scratch and plan capacity
  int max_batch_page_ids = 0;  // page_ids.size() per step; 0: the pool's num_pages
  // Sampling rows a step is expected to have at most (0: max_batch_rows). Not a limit: graphed
  // steps reserve logits for max(min(step.max_graph_rows, this), kMinLogitsRows) rows at once
  // (growing the buffer later drops the graphs), and a step with more rows grows it.
  int max_sampling_rows = 0;
  attention::PlanOptions plan;  // policy, deterministic, cost model
  // How each decode-sized GEMM shape's cuBLASLt algorithm is chosen at its first use (gemm.h):
  // the heuristic's first pick (default; no timing stalls, bit-reproducible across processes),
  // timed once per bucket of row counts, or timed per row count.
  GemmTuning gemm_tuning = GemmTuning::kHeuristic;
  // The layers' weight matrices: bf16, or float8 e4m3 with a scale per matrix, their GEMM
  // inputs quantized with a scale per step at run time (weight_quantization.h;
  // docs/forward-cuda.md).
  // kFp8 needs a device of compute capability 8.9 or later (kUnimplemented otherwise).
  WeightQuantization quantization = WeightQuantization::kNone;
  // kFp8: steps of at most this many rows run the layers' float8 matrices through
  // skinny_linear_fp8 (skinny_gemm.h: our few-row kernel, x not quantized) instead of
  // quantizing x for cuBLASLt; 0 .. cuda::kSkinnyMaxRows, 0: cuBLASLt always.
  int skinny_gemm_rows = cuda::kSkinnyMaxRows;
  // The KV pool's elements: bf16, or float8 e4m3 (one byte; kv_cache_dtype.h) with each layer's
  // LayerWeights::k_scale / v_scale (1 for create_random). kFp8E4m3 needs a device of compute
  // capability 8.9 or later (kUnimplemented otherwise).
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
  // Host threads that copy the logits from pinned staging into the caller's vector (the
  // caller's thread included); 0: half the hardware threads, at most 8.
  int logits_copy_threads = 0;
  CudaStepOptions step;  // graphs and profiling; also settable later (set_step_options)
};

// The ops of one step, in order, for CudaStepProfile::op_gpu_ms.
enum class StepOp : int {
  kUpload,  // page copies + metadata host -> device (GPU side)
  kEmbed,
  kRopeTable,  // cos/sin of every row's position, once per step
  kInputNorm,
  kQkvGemm,
  kQkvEpilogue,  // bias, q/k norm, RoPE, KV append
  kAttention,
  kOGemm,
  kPostNorm,
  kGateUpGemm,
  kSiluMul,
  kDownGemm,
  kFinalNorm,
  kLmHead,
  kMask,        // token masks of the argmax and sample rows (structured outputs)
  kArgmax,      // argmax of the kOutputArgmax rows
  kSample,      // temperature draws of the kOutputSample rows
  kLogitsCopy,  // logits (and argmax and sampled ids) device -> pinned host
  kCount,
};
inline constexpr int kNumStepOps = static_cast<int>(StepOp::kCount);
const char* step_op_name(StepOp op);

// Where the last forward() spent its time, milliseconds. Host phases by the steady clock.
struct CudaStepProfile {
  double validate_ms = 0;     // validate_forward_batch + capacity checks + buffer reserves
  double plan_ms = 0;         // attention layout + validate + make_plan
  double upload_ms = 0;       // Workspace::upload (serialise + copy of the plan)
  double metadata_ms = 0;     // page copies + metadata staging + its copy (host side)
  double enqueue_ms = 0;      // launching the step's kernels, or the graph (+ capture if new),
                              // and then writing its masks:
  double masks_ms = 0;        // ... of which the masks (ForwardBatch::fill_masks or a copy)
  double sync_ms = 0;         // waiting for the device at the end
  double logits_copy_ms = 0;  // pinned staging -> the caller's vectors
  // kOutputSample rows the device left to the host (ops.h sample_rows), and their time.
  int host_sampled_rows = 0;
  double host_sample_ms = 0;
  double total_ms = 0;          // all of forward()
  double gpu_ms = 0;            // CUDA events around the step's device work (upload to logits)
  bool graph_replayed = false;  // the step ran as a graph replay
  bool graph_captured = false;  // ... and the graph was captured in this step
  // Per op, summed over layers (CUDA events; only with CudaForwardOptions::profile_ops and
  // an eager step; zero otherwise). Includes launch gaps where the GPU waited for the host.
  double op_gpu_ms[kNumStepOps] = {};
};

class CudaForwardBackend final : public ForwardBackend {
 public:
  // The logits buffer holds at least this many rows: the prompt-scoring pass runs the LM head
  // on blocks of this many rows (ForwardBatch::score_targets).
  static constexpr int kMinLogitsRows = 64;
  // Validates weights (validate_weights), pool and options; checks the attention engine
  // supports the shape (head_dim 64/128/256, group_size <= 128); uploads the weights as bf16
  // (converted on the host, one tensor at a time), allocates the zeroed KV pool, the scratch
  // for max_batch_rows and the attention Workspace. Errors: kInvalidArgument naming the
  // field or tensor; kUnimplemented without a CUDA device; kResourceExhausted naming the
  // allocation that did not fit; kInternal for other CUDA failures.
  static Result<std::unique_ptr<CudaForwardBackend>> create(const ModelWeights& weights,
                                                            const KvPoolShape& pool,
                                                            const CudaForwardOptions& options);
  // Same, with weights drawn on the device (fill_random in ops.h, seeded): matrices and
  // embeddings N(0, 0.02), norm weights 1 + N(0, 0.1). For benchmarks of large shapes
  // (vLLM's --load-format dummy); nothing of the weights exists on the host.
  static Result<std::unique_ptr<CudaForwardBackend>> create_random(
      const ModelConfig& config, const KvPoolShape& pool, const CudaForwardOptions& options,
      uint64_t seed);

  ~CudaForwardBackend() override;
  std::string_view name() const override { return "cuda"; }
  const ModelConfig& config() const override;
  Status forward(const ForwardBatch& batch, ForwardOutput& out) override;
  BackendStats stats() const override;

  const KvPoolShape& pool_shape() const;
  // The attention plan of the last successful forward with >= 1 request.
  const attention::Plan& last_plan() const;
  // Replaces options.step (kInvalidArgument naming the field, nothing changed); drops the
  // captured graphs when max_graph_rows or max_cuda_graphs change.
  Status set_step_options(const CudaStepOptions& step);
  // Replaces options.plan for the following steps. kInvalidArgument naming the field as
  // attention::check_plan_options does (nothing changed).
  Status set_plan_options(const attention::PlanOptions& plan);
  // Timings of the last forward() (see CudaStepProfile).
  const CudaStepProfile& last_step_profile() const;
  // Graphs captured and held now.
  int num_cuda_graphs() const;
  // Device bytes of the weights (bf16 or e4m3 matrices, f32 norms, biases and scales) and of
  // the KV pool, summed over the tensor-parallel ranks.
  size_t weight_bytes() const;
  size_t kv_pool_bytes() const;
  // Device bytes of the logits buffer now (it grows with the steps' sampling rows, see
  // CudaForwardOptions::max_sampling_rows).
  size_t logits_bytes() const;
  // Copies layer's k and v pages to the host (tests): [num_pages, page_size, kv_heads,
  // head_dim] bf16 bits each (with tensor parallelism, rank 0's KV heads); a float8 pool's
  // e4m3 values times the layer's k_scale / v_scale, rounded to bf16.
  Status read_kv_pages(int layer, std::vector<uint16_t>& k, std::vector<uint16_t>& v) const;

  struct Impl;

 private:
  explicit CudaForwardBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace packserve::model
