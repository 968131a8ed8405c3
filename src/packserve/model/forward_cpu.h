// forward_cpu.h: the CPU forward backend (issue 4 "Forward and sampling"): f32 compute,
// OpenBLAS GEMMs, the attention engine's planner and CPU executor. The reference backend for
// tests and the embedded default on machines without a GPU.
//
// One forward(batch) = one engine step over a flat packed batch (forward.h):
//   validate everything (forward_batch.h), build the attention BatchLayout and make_plan ONCE
//   -> page_copies -> embedding gather -> per layer:
//        h = RMSNorm(x) -> qkv = h Wqkv^T (+ Qwen2 bias) -> Qwen3 per-head RMSNorm of q, k
//        -> RoPE at each row's own position -> K/V of the rows into their page slots
//        -> attention::run_cpu(plan) -> x += attn Wo^T
//        -> h = RMSNorm(x) -> x += (silu(h Wg^T) * (h Wu^T)) Wd^T
//   -> final RMSNorm and LM head on the last row of each request with samples[r] only (the
//   argmax of the rows with kOutputArgmax).
// Weights are converted to f32 once at creation (exact for f16/bf16); q/k/v are fused into one
// [Q + 2 KV, H] matrix and gate/up into one [2 I, H] matrix, so a layer runs 4 GEMMs.
// KV pool: per layer, k and v of [num_pages, page_size, num_kv_heads, head_dim] elements,
// zeroed at creation: f32 (KvCacheDtype::kAuto), or with kFp8E4m3 one e4m3 byte each, the
// byte nearest key / k_scale (value / v_scale) of the layer (LayerWeights; f32 division,
// e4m3_from_float: ties to even, saturated at +-448, NaN only from NaN, as the CUDA epilogue's
// __fdiv_rn and __nv_cvt_float_to_fp8(__NV_SATFINITE)), which attention reads back as
// e4m3_value(byte) * scale (run_cpu's decoding table). Row r of request at position p writes page
// page_ids[page_indptr[r] + p / page_size], slot p % page_size. With kAuto the scales are ignored.
// Failure contract: every check runs before anything is written, so kInvalidArgument leaves
// the KV pool unchanged. Determinism: with PlanOptions::deterministic a request's attention
// bits do not depend on the rest of the batch; the GEMMs are OpenBLAS's, whose rounding may
// depend on the number of rows (differences ~1e-7 relative), so a request alone and in a
// batch agree to f32 rounding, not bit for bit.
// Thread-safety: one thread drives a backend (forward mutates the KV pool and scratch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "packserve/attention/plan.h"
#include "packserve/common/status.h"
#include "packserve/common/worker_pool.h"
#include "packserve/model/forward.h"
#include "packserve/model/forward_batch.h"
#include "packserve/model/kv_cache_dtype.h"
#include "packserve/model/weights.h"

namespace packserve::model {

struct CpuForwardOptions {
  int num_threads = 1;  // attention executor threads (OpenBLAS keeps its own setting), >= 1
  // The planner's view of the CPU: work-item queues to balance (>= 1). run_cpu executes all
  // of them whatever num_threads is; more CTAs only means finer splits of long KV.
  int num_ctas = 8;
  attention::PlanOptions plan;  // policy, deterministic, cost model
  // Threads drawing a step's kOutputSample rows (sample_draw per row), 0 to 64; 0:
  // default_worker_threads() (the engine's --sampler-threads).
  int sample_threads = 0;
  // The KV pool's elements: kAuto f32 (the compute type), kFp8E4m3 e4m3 bytes with the
  // layers' k_scale / v_scale (see above), a quarter of the bytes (the engine's
  // --kv-cache-dtype).
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
};

class CpuForwardBackend final : public ForwardBackend {
 public:
  // Validates the weights (validate_weights), the pool shape and the options (with kFp8E4m3
  // also every layer's k_scale / v_scale: finite and > 0); checks the attention engine
  // supports the shape (head_dim 64/128/256, group_size <= 128); converts the weights to f32
  // and allocates the zeroed KV pool. Errors: kInvalidArgument naming the tensor or field;
  // kResourceExhausted when the pool cannot be allocated.
  static Result<std::unique_ptr<CpuForwardBackend>> create(const ModelWeights& weights,
                                                           const KvPoolShape& pool,
                                                           const CpuForwardOptions& options);

  std::string_view name() const override { return "cpu"; }
  const ModelConfig& config() const override { return config_; }
  Status forward(const ForwardBatch& batch, ForwardOutput& out) override;

  const KvPoolShape& pool_shape() const { return pool_; }
  KvCacheDtype kv_cache_dtype() const { return options_.kv_cache_dtype; }
  // The KV pool of `layer` (for tests): [num_pages, page_size, num_kv_heads, head_dim] f32
  // with kAuto, empty with kFp8E4m3.
  std::span<const float> k_pages(int layer) const;
  std::span<const float> v_pages(int layer) const;
  // The same with kFp8E4m3: e4m3 bytes (values / the layer's scale); empty with kAuto.
  std::span<const uint8_t> k_pages_fp8(int layer) const;
  std::span<const uint8_t> v_pages_fp8(int layer) const;
  // Bytes of the KV pool, every layer, k and v: num_pages x page_size x kv_size x 2 x layers x
  // cpu_kv_cache_element_bytes(kv_cache_dtype) (kv_cache_dtype.h).
  size_t kv_pool_bytes() const;
  // The attention plan of the last successful forward with >= 1 request.
  const attention::Plan& last_plan() const { return plan_; }

 private:
  struct Layer {
    std::vector<float> input_norm, qkv_w, qkv_b, q_norm, k_norm, o_w, post_norm, gate_up_w, down_w;
    std::vector<float> k_pages, v_pages;   // kAuto (else empty)
    std::vector<uint8_t> k_fp8, v_fp8;     // kFp8E4m3 (else empty)
    float k_scale = 1.0f, v_scale = 1.0f;  // LayerWeights'; used by kFp8E4m3 only
  };
  CpuForwardBackend() = default;
  bool kv_fp8() const { return options_.kv_cache_dtype == KvCacheDtype::kFp8E4m3; }
  void copy_pages(const std::vector<kv::PageCopy>& copies);
  Status run_layer(Layer& layer, const ForwardBatch& batch);

  ModelConfig config_;
  KvPoolShape pool_;
  CpuForwardOptions options_;
  std::vector<float> embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  std::vector<double> inv_freq_;
  // Per-step state and scratch, reused across steps.
  attention::BatchLayout layout_;
  attention::Plan plan_;
  std::vector<int32_t> positions_;
  std::vector<DrawRow> draws_;  // the step's draw rows
  std::vector<float> cos_sin_, x_, h_, qkv_, q_, attn_, gate_up_, act_;
  std::unique_ptr<WorkerPool> sample_pool_;  // draws the kOutputSample rows
};

}  // namespace packserve::model
