// ops.h: the element-wise and row-wise kernels of the CUDA forward (forward_cuda.h), as host
// launch functions on device pointers. No CUDA header (STYLE.md §1): bf16 buffers are
// uint16_t bit patterns, streams are StreamHandle (= cudaStream_t).
//
// Formulas (checked against float64 host references in ops_cuda_test.cu; same as ops_cpu.h):
//   embed_gather:  x[r, :] = f32(embed[token_ids[r], :])
//   rmsnorm:       y[i, j] = bf16(x[s, j] / sqrt(mean_k(x[s, k]^2) + eps) * w[j]),
//                  s = row_index ? row_index[i] : i                 (sum of squares in f32)
//   rope_cos_sin:  cos_sin[r, p] = f32(attention_factor * (cos, sin)(positions[r] * inv_freq[p]))
//                  in double
//   qkv_epilogue:  per row r of a fused f32 [rows, Q + 2 KV] buffer:
//                    v += bias (Qwen2); q, k heads: RMSNorm over head_dim with q_norm/k_norm
//                    (Qwen3); RoPE rotate-half at positions[r] with angle = pos * inv_freq[p]
//                    and cos/sin in double times rope_attention_factor (from the cos_sin
//                    table when given, else per call); then q -> q_out[r] (bf16) and k, v -> the
//                    pages at (kv_page[r], kv_slot[r]) of [num_pages, page_size, num_kv_heads,
//                    head_dim]; one warp per (row, head), head_dim 64/128/256
//   rmsnorm:       one pass (row in registers, float4) when hidden % 4 == 0 and <= 8192,
//                  else two passes
//   silu_mul:      y[r, i] = bf16(g / (1 + exp(-g)) * u), g = gate_up[r, i], u = gate_up[r, I+i]
//                  (16-byte vectors when I % 8 == 0)
//   argmax_rows:   out[r] = argmax_lowest(logits[r, :]) (common/argmax.h: NaN never wins, ties
//                  to the lowest index, 0 when the maximum is -inf); one CTA per row
//   mask_rows:     logits[r, t] = -inf where bit (t % 32) of row r's mask word t / 32 is clear,
//                  row r's mask being masks[mask_index[r] * ceil(vocab / 32) ..] (none when
//                  mask_index[r] < 0): forward.h's mask_logits. A thread per token
//   sample_rows:   (out[r], out_logprobs[r]) = sample_draw_adjusted(logits[r, :], row r's
//                  adjusts, draws[r]) (common/sample_draw.h, the same token ids as the host;
//                  the logprob, the raw row's, within a float ulp or two), or out[r] = -1 for
//                  a row left to the host: a row whose maximum (after its adjustments) is
//                  infinite; with draws[r].top_logprobs = k > 0 also out_top[r, 0..k) =
//                  top_logprobs(raw row, k) (the host's ids; logprobs as out_logprobs'). Top-k /
//                  top-p sets of any size (a radix descent narrows what does not fit the
//                  kMaxSampleCandidates keys sorted in shared memory). A row's adjustments are
//                  applied to its logits in place (a row left to the host gets its raw logits
//                  back); rows without them are only read. One CTA per row; vocab <= 2^20
//   score_rows:    out_logprobs[r] = score_row(logits[r, :], targets[r], tops[r]).logprob and
//                  out_top[r, 0..min(tops[r], vocab)) = its top (common/sample_draw.h: the
//                  host's ids; logprobs as sample_rows', within a float ulp or two); rows
//                  whose maximum is infinite too. One CTA per row; vocab <= 2^20
//   row_absmax:    amax[r] = max_j |x[r, j]|; one CTA per row
//   quantize_fp8:  scale = max_i amax[i] / kFp8E4m3Max (1 when all are 0), xq[r, j] =
//                  e4m3(x[r, j] / scale) (f32 division, round to nearest even, saturated to
//                  +-448): x ~ scale * xq, one scale for the whole tensor (cuBLASLt takes
//                  per-tensor float8 scales on sm_90; its outer-vector scales it refuses).
//                  amax: row_absmax's rows, or one value. The activations and the weights of
//                  --quantization fp8 (gemm.h linear_fp8)
//   fill_random:   out[i] = mean + std * z_i, z_i ~ N(0, 1)-ish (sum of 4 uniforms) from a hash
//                  of (seed, i): deterministic, for device-side dummy weights.
// Every function checks its sizes (kInvalidArgument naming the argument), launches
// asynchronously on `stream` and returns kInternal when the launch fails. The kernels of a
// decode step's chain (embed_gather, rope_cos_sin, rmsnorm, qkv_epilogue, silu_mul) are
// programmatic launches for up to 8 rows (device_util.cuh launch_step_kernel): each waits for
// the kernel before it, then lets the next one be scheduled.
// Thread-safety: pure launches; distinct outputs may be written from several threads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "packserve/attention/cuda/run_cuda.h"
#include "packserve/common/dtype.h"
#include "packserve/common/logit_adjust.h"
#include "packserve/common/sample_draw.h"
#include "packserve/common/status.h"
#include "packserve/common/temperature_sample.h"

namespace packserve::model::cuda {

using StreamHandle = attention::cuda::StreamHandle;

Status embed_gather(const uint16_t* embed, const int32_t* token_ids, int rows, int hidden, float* x,
                    StreamHandle stream);

Status rmsnorm(const float* x, const int32_t* row_index, int rows, int hidden, const float* w,
               float eps, uint16_t* y, StreamHandle stream);

struct QkvEpilogueArgs {
  const float* qkv = nullptr;          // [rows, Q + 2 KV] f32, read only
  const float* bias = nullptr;         // [Q + 2 KV] or nullptr
  const float* q_norm = nullptr;       // [head_dim] or nullptr (then k_norm must be too)
  const float* k_norm = nullptr;       // [head_dim] or nullptr
  const double* inv_freq = nullptr;    // [head_dim / 2]; used when cos_sin is null
  double rope_attention_factor = 1.0;  // cos and sin factor (YaRN); used when cos_sin is null
  const float* cos_sin = nullptr;      // [rows, head_dim / 2, 2] from rope_cos_sin, or null
  const int32_t* positions = nullptr;  // [rows]
  const int32_t* kv_page = nullptr;    // [rows]
  const int32_t* kv_slot = nullptr;    // [rows], < page_size
  int rows = 0;
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // 64, 128 or 256
  int page_size = 0;
  float eps = 1e-6f;
  uint16_t* q_out = nullptr;  // [rows, Q] bf16
  // [num_pages, page_size, num_kv_heads, head_dim]: bf16, or with kv_fp8 e4m3 bytes: each key
  // (value) divided by k_scale (v_scale), rounded to nearest even and saturated at +-448 (the
  // float8 KV cache of run_cuda.h's DeviceBatch::kv_fp8, whose k_scale / v_scale read it back).
  // The scales are finite and > 0, and 1 without kv_fp8.
  void* k_pages = nullptr;
  void* v_pages = nullptr;
  bool kv_fp8 = false;
  float k_scale = 1.0f, v_scale = 1.0f;
};
Status qkv_epilogue(const QkvEpilogueArgs& args, StreamHandle stream);

// cos_sin[r, p] = attention_factor * (cos, sin)(positions[r] * inv_freq[p]) for p < head_dim /
// 2, computed in double and rounded to f32: the RoPE table of one step, shared by every layer's
// epilogue.
Status rope_cos_sin(const int32_t* positions, int rows, const double* inv_freq, int head_dim,
                    double attention_factor, float* cos_sin, StreamHandle stream);

Status silu_mul(const uint16_t* gate_up, int rows, int inner, uint16_t* y, StreamHandle stream);

// The largest finite float8 e4m3 value.
inline constexpr float kFp8E4m3Max = 448.0f;
// x: [rows, cols] bf16; amax: [rows] f32.
Status row_absmax(const uint16_t* x, int rows, int cols, float* amax, StreamHandle stream);
// x: [rows, cols] bf16; amax: [num_amax] f32 (device); xq: [rows, cols] e4m3 bytes; scale: one
// f32 (device).
Status quantize_fp8(const uint16_t* x, int rows, int cols, const float* amax, int num_amax,
                    uint8_t* xq, float* scale, StreamHandle stream);

// y[i] += x[i] for i < n (f32; TpGroup's one-device all-reduce).
Status add_f32(float* y, const float* x, size_t n, StreamHandle stream);

// logits: [rows, vocab] f32, 16-byte aligned when vocab % 4 == 0 (then read as float4);
// out: [rows].
Status argmax_rows(const float* logits, int rows, int vocab, int32_t* out, StreamHandle stream);

// logits: [rows, vocab] f32; mask_index: [rows] (device); masks: [masks, ceil(vocab / 32)]
// (device).
Status mask_rows(float* logits, int rows, int vocab, const int32_t* mask_index,
                 const uint32_t* masks, StreamHandle stream);

// The most top-k / top-p candidates sample_rows sorts at once in shared memory (64 KiB of
// keys).
inline constexpr int kMaxSampleCandidates = 8192;

// The logit bias and penalties of sample_rows' rows (device arrays): row r's are
// entries[indptr[r] .. indptr[r + 1]) (common/logit_adjust.h; tokens strictly increasing, in
// [0, vocab)); raw: as many floats as entries, where each adjusted logit's raw value is kept.
// indptr null: no row has any.
struct SampleAdjusts {
  const int32_t* indptr = nullptr;
  const LogitAdjust* entries = nullptr;
  float* raw = nullptr;
};

// logits: [rows, vocab] f32; draws: [rows] (device); out, out_logprobs: [rows]; out_top:
// [rows, kMaxTopLogprobs], row r's first min(draws[r].top_logprobs, vocab) written (not for a
// row left to the host), null when no draw asks. top_logprobs > 0 needs logprob (as
// validate_forward_batch checks): the alternatives use the logprob's maximum and log-sum.
Status sample_rows(float* logits, int rows, int vocab, const SampleDraw* draws,
                   const SampleAdjusts& adjusts, int32_t* out, float* out_logprobs,
                   TopLogprob* out_top, StreamHandle stream);

// logits: [rows, vocab] f32 (read only); targets, tops: [rows] (device), targets in [0, vocab),
// tops in [0, kMaxTopLogprobs]; out_logprobs: [rows]; out_top: [rows, kMaxTopLogprobs], row r's
// first min(tops[r], vocab) written.
Status score_rows(const float* logits, int rows, int vocab, const int32_t* targets,
                  const int32_t* tops, float* out_logprobs, TopLogprob* out_top,
                  StreamHandle stream);

// dtype: kBF16 or kF32.
Status fill_random(void* out, size_t n, DType dtype, uint64_t seed, float mean, float std,
                   StreamHandle stream);

}  // namespace packserve::model::cuda
