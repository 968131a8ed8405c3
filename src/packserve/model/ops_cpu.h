// ops_cpu.h: the f32 building blocks of the CPU forward (forward_cpu.h): RMSNorm, rotary
// position embedding (rotate-half / NeoX layout, as Hugging Face's Llama and Qwen models),
// SiLU * mul, and y = x W^T through OpenBLAS.
//
// Formulas (checked against float64 in ops_cpu_test.cc):
//   rmsnorm:   y[i] = x[i] / sqrt(mean_j(x[j]^2) + eps) * w[i]        (sum of squares in double)
//   rope:      for pair p in [0, d/2), angle = position * inv_freq[p]:
//                y[p]       = x[p] * cos - x[p + d/2] * sin
//                y[p + d/2] = x[p + d/2] * cos + x[p] * sin
//   silu_mul:  y[i] = g[i] / (1 + exp(-g[i])) * u[i]
//   linear:    y[r, o] = sum_i x[r, i] * w[o, i] (+ bias[o])           (w in HF layout [out, in])
// rope_inv_freq gives inv_freq[p] = theta^(-2p/d), then with config.h's RopeScaling:
//   llama3 (transformers' _compute_llama3_parameters): wavelen = 2 pi / inv_freq; wavelen >
//     original/low_freq_factor -> inv_freq / factor; wavelen < original/high_freq_factor ->
//     unchanged; otherwise the smooth interpolation (1 - s) * inv_freq / factor + s * inv_freq
//     with s = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
//   yarn (_compute_yarn_parameters): c(b) = d ln(original / (2 pi b)) / (2 ln theta), the pair
//     index whose frequency turns b times over the original context; low = c(beta_fast),
//     high = c(beta_slow) (floored / ceiled when truncate), clamped to [0, d - 1] (high +=
//     0.001 if equal); ramp(p) = clamp((p - low) / (high - low), 0, 1); inv_freq[p] =
//     ramp * inv_freq / factor + (1 - ramp) * inv_freq (pairs below low keep their frequency,
//     pairs above high are interpolated);
//   linear: inv_freq / factor.
// rope_table multiplies cos and sin by rope_attention_factor (yarn's; 1 otherwise), as
// transformers' rotary embeddings do with attention_scaling.
// Thread-safety: pure functions (linear() uses OpenBLAS with its own thread setting).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "packserve/model/config.h"

namespace packserve::model {

// x, y: [rows, dim]; w: [dim]. y may alias x.
void rmsnorm(std::span<const float> x, std::span<const float> w, int64_t dim, float eps,
             std::span<float> y);

// inv_freq: [head_dim / 2], in double.
std::vector<double> rope_inv_freq(int64_t head_dim, double theta,
                                  const std::optional<RopeScaling>& scaling);
// The factor of cos and sin: scaling->attention_factor, 1 without scaling.
double rope_attention_factor(const std::optional<RopeScaling>& scaling);

// Per-row rotation table: cos_sin[r, p] = attention_factor * (cos, sin) of positions[r] *
// inv_freq[p], computed in double and rounded to f32. Layout [rows, head_dim / 2, 2].
void rope_table(std::span<const int32_t> positions, std::span<const double> inv_freq,
                double attention_factor, std::vector<float>& cos_sin);

// Rotates x in place: x [rows, num_heads, head_dim] with head_dim = 2 * inv_freq size, row r
// uses the table's row r. Rows are `row_stride` floats apart (>= num_heads * head_dim), so a
// fused QKV buffer can be rotated where it lies.
void apply_rope(std::span<float> x, int64_t rows, int64_t row_stride, int64_t num_heads,
                int64_t head_dim, std::span<const float> cos_sin);

// y[i] = silu(gate[i]) * up[i] for rows of a fused [rows, 2 * inner] buffer (gate first, then
// up, as forward_cpu.cc packs gate_proj and up_proj); y: [rows, inner].
void silu_mul(std::span<const float> gate_up, int64_t rows, int64_t inner, std::span<float> y);

// y [rows, out] = x [rows, in] * w^T, w [out, in]; bias [out] or empty. With accumulate, y +=.
void linear(std::span<const float> x, int64_t rows, int64_t in, std::span<const float> w,
            int64_t out, std::span<const float> bias, std::span<float> y, bool accumulate = false);

}  // namespace packserve::model
