// cost_model.h: the simulator's model of one engine step's duration (issue 3 "Simulator"):
// a roofline over the step's work, with coefficients read from a JSON file
// (data/cost_models/h100_llama31_8b.json is the default; docs/simulator.md gives the source
// of every number).
//
// Work of a step (StepWork, from a ScheduledBatch):
//   rows            = prefill tokens + decode rows (query rows of the flat packed batch)
//   sample_rows     = rows whose logits are sampled (lm_head is applied to these only)
//   attention_pairs = sum over sequences of causal (query, key) pairs:
//                     q_len * start_position + q_len * (q_len + 1) / 2
//   kv_read_tokens  = sum over sequences of kv_len (each request's KV is read once per layer)
// Step time:
//   gemm_flops   = 2 * linear_params_per_layer * num_layers * rows
//                + 2 * hidden * vocab * sample_rows
//   attn_flops   = 4 * num_qo_heads * head_dim * num_layers * attention_pairs
//   bytes        = weight_bytes (layers + lm_head, read once per step, at dtype_bytes)
//                + kv_bytes_per_token * (kv_read_tokens + rows)   (read + write of new KV)
//   step_time_s  = step_overhead_us * 1e-6
//                + max(bytes / hbm_bytes_per_s,
//                      gemm_flops / gemm_flops_per_s + attn_flops / attention_flops_per_s)
// with kv_bytes_per_token = 2 (K and V) * num_layers * num_kv_heads * head_dim * kv_dtype_bytes.
// The KV pool holds floor(kv_capacity_bytes / (kv_bytes_per_token * page_size)) pages. A float8
// KV cache (kv_dtype_bytes 1) halves kv_bytes_per_token against bf16's 2, and the floor is
// taken of the doubled quotient: 2n or 2n + 1 pages where bf16 gets n.
// Invariants: a CostModel from parse/load is validated: every count >= 1, kv_dtype_bytes in
// {1, 2, 4}, every rate > 0.
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "packserve/common/status.h"
#include "packserve/sched/batch.h"

namespace packserve::sched {

struct CostModelConfig {
  std::string name;  // free text, e.g. "Llama-3.1-8B bf16 on one H100 SXM"
  // Model shape (HF config.json names).
  int64_t num_layers = 32;
  int64_t hidden_size = 4096;
  int64_t num_qo_heads = 32;
  int64_t num_kv_heads = 8;
  int64_t head_dim = 128;
  int64_t intermediate_size = 14336;
  int64_t vocab_size = 128256;
  int64_t dtype_bytes = 2;  // bytes per weight element (bf16); the weights' HBM traffic
  // Bytes per K or V element in the KV pool: 1 (float8 e4m3), 2 (bf16/fp16) or 4 (f32). Prices
  // the KV traffic and the pool's page count. The JSON key model.kv_dtype_bytes is optional:
  // parse() sets it to dtype_bytes when absent (a bf16 model with a bf16 KV cache); set both
  // when building a config in code.
  int64_t kv_dtype_bytes = 2;
  // Device.
  double hbm_bytes_per_s = 3.0e12;        // achievable HBM bandwidth
  double gemm_flops_per_s = 6.0e14;       // achievable dense bf16 GEMM throughput
  double attention_flops_per_s = 4.0e14;  // achievable attention-kernel throughput
  double kv_capacity_bytes = 55.0e9;      // HBM left for KV after weights and activations
  double step_overhead_us = 1500.0;       // per-step fixed cost (scheduling, launches, sampling)

  Status validate() const;
};

struct StepWork {
  int64_t num_prefill_tokens = 0;
  int64_t num_decode_rows = 0;
  int64_t num_sample_rows = 0;
  int64_t attention_pairs = 0;
  int64_t kv_read_tokens = 0;
};
StepWork step_work_of(const ScheduledBatch& batch);

class CostModel {
 public:
  explicit CostModel(const CostModelConfig& config);  // must be valid (PS_CHECK)

  // The JSON object of docs/simulator.md: {"name", "model": {...}, "device": {...}}; every key
  // required except model.kv_dtype_bytes (default: model.dtype_bytes), unknown keys rejected;
  // `source` names the file in messages.
  static Result<CostModel> parse(std::string_view json_text, const std::string& source);
  static Result<CostModel> load(const std::string& path);

  double step_time_ms(const StepWork& work) const;
  double kv_bytes_per_token() const;     // K and V of every layer, at kv_dtype_bytes
  double weight_bytes_per_step() const;  // layers + lm_head at dtype_bytes (embedding: gather)
  int64_t linear_params_per_layer() const;
  // KV pages of page_size tokens that fit in kv_capacity_bytes.
  int64_t num_kv_pages(int64_t page_size) const;
  const CostModelConfig& config() const { return config_; }

 private:
  CostModelConfig config_;
};

}  // namespace packserve::sched
