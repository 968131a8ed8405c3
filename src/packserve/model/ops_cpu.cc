#include "packserve/model/ops_cpu.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "packserve/common/status.h"

namespace packserve::model {

void rmsnorm(std::span<const float> x, std::span<const float> w, int64_t dim, float eps,
             std::span<float> y) {
  PS_CHECK(dim > 0 && static_cast<int64_t>(w.size()) == dim && x.size() == y.size() &&
           static_cast<int64_t>(x.size()) % dim == 0)
      << "rmsnorm: x " << x.size() << " w " << w.size() << " dim " << dim;
  const int64_t rows = static_cast<int64_t>(x.size()) / dim;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * dim;
    float* yr = y.data() + r * dim;
    double sum_sq = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
    const float inv_rms =
        static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(dim) + eps));
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv_rms * w[i];
  }
}

std::vector<double> rope_inv_freq(int64_t head_dim, double theta,
                                  const std::optional<RopeScaling>& scaling) {
  const int64_t half = head_dim / 2;
  const double dim = static_cast<double>(head_dim);
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t p = 0; p < half; ++p) {
    inv_freq[p] = 1.0 / std::pow(theta, static_cast<double>(2 * p) / dim);
  }
  if (!scaling) return inv_freq;
  const double original = static_cast<double>(scaling->original_max_position_embeddings);
  switch (scaling->type) {
    case RopeType::kLinear:
      for (double& f : inv_freq) f /= scaling->factor;
      break;
    case RopeType::kLlama3: {
      const double low_freq_wavelen = original / scaling->low_freq_factor;
      const double high_freq_wavelen = original / scaling->high_freq_factor;
      for (double& f : inv_freq) {
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen > low_freq_wavelen) {
          f = f / scaling->factor;
        } else if (wavelen >= high_freq_wavelen) {  // medium: neither < high nor > low
          const double s = (original / wavelen - scaling->low_freq_factor) /
                           (scaling->high_freq_factor - scaling->low_freq_factor);
          f = (1.0 - s) * f / scaling->factor + s * f;
        }
      }
      break;
    }
    case RopeType::kYarn: {
      // The pair index at which a frequency turns `rotations` times over the original context.
      const auto correction_dim = [&](double rotations) {
        return dim * std::log(original / (rotations * 2.0 * std::numbers::pi)) /
               (2.0 * std::log(theta));
      };
      double low = correction_dim(scaling->beta_fast);
      double high = correction_dim(scaling->beta_slow);
      if (scaling->truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, dim - 1.0);
      if (low == high) high += 0.001;
      for (int64_t p = 0; p < half; ++p) {
        const double ramp = std::clamp((static_cast<double>(p) - low) / (high - low), 0.0, 1.0);
        double& f = inv_freq[static_cast<size_t>(p)];
        f = ramp * f / scaling->factor + (1.0 - ramp) * f;
      }
      break;
    }
  }
  return inv_freq;
}

double rope_attention_factor(const std::optional<RopeScaling>& scaling) {
  return scaling ? scaling->attention_factor : 1.0;
}

void rope_table(std::span<const int32_t> positions, std::span<const double> inv_freq,
                double attention_factor, std::vector<float>& cos_sin) {
  const size_t half = inv_freq.size();
  cos_sin.resize(positions.size() * half * 2);
  for (size_t r = 0; r < positions.size(); ++r) {
    for (size_t p = 0; p < half; ++p) {
      const double angle = static_cast<double>(positions[r]) * inv_freq[p];
      cos_sin[(r * half + p) * 2] = static_cast<float>(std::cos(angle) * attention_factor);
      cos_sin[(r * half + p) * 2 + 1] = static_cast<float>(std::sin(angle) * attention_factor);
    }
  }
}

void apply_rope(std::span<float> x, int64_t rows, int64_t row_stride, int64_t num_heads,
                int64_t head_dim, std::span<const float> cos_sin) {
  const int64_t half = head_dim / 2;
  PS_CHECK(rows == 0 ||
           ((rows - 1) * row_stride + num_heads * head_dim <= static_cast<int64_t>(x.size()) &&
            static_cast<int64_t>(cos_sin.size()) >= rows * half * 2))
      << "apply_rope: x " << x.size() << " rows " << rows << " stride " << row_stride;
  for (int64_t r = 0; r < rows; ++r) {
    const float* cs = cos_sin.data() + r * half * 2;
    for (int64_t h = 0; h < num_heads; ++h) {
      float* v = x.data() + r * row_stride + h * head_dim;
      for (int64_t p = 0; p < half; ++p) {
        const float c = cs[2 * p];
        const float s = cs[2 * p + 1];
        const float a = v[p];
        const float b = v[p + half];
        v[p] = a * c - b * s;
        v[p + half] = b * c + a * s;
      }
    }
  }
}

void silu_mul(std::span<const float> gate_up, int64_t rows, int64_t inner, std::span<float> y) {
  PS_CHECK(static_cast<int64_t>(gate_up.size()) == rows * 2 * inner &&
           static_cast<int64_t>(y.size()) == rows * inner)
      << "silu_mul: gate_up " << gate_up.size() << " y " << y.size();
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up.data() + r * 2 * inner;
    const float* u = g + inner;
    float* yr = y.data() + r * inner;
    for (int64_t i = 0; i < inner; ++i) yr[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void linear(std::span<const float> x, int64_t rows, int64_t in, std::span<const float> w,
            int64_t out, std::span<const float> bias, std::span<float> y, bool accumulate) {
  PS_CHECK(static_cast<int64_t>(x.size()) == rows * in &&
           static_cast<int64_t>(w.size()) == out * in &&
           static_cast<int64_t>(y.size()) == rows * out &&
           (bias.empty() || static_cast<int64_t>(bias.size()) == out))
      << "linear: x " << x.size() << " w " << w.size() << " y " << y.size() << " rows " << rows
      << " in " << in << " out " << out;
  if (rows == 0) return;
  float beta = accumulate ? 1.0f : 0.0f;
  if (!bias.empty()) {
    for (int64_t r = 0; r < rows; ++r) {
      float* yr = y.data() + r * out;
      for (int64_t o = 0; o < out; ++o) yr[o] = accumulate ? yr[o] + bias[o] : bias[o];
    }
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(rows),
              static_cast<blasint>(out), static_cast<blasint>(in), 1.0f, x.data(),
              static_cast<blasint>(in), w.data(), static_cast<blasint>(in), beta, y.data(),
              static_cast<blasint>(out));
}

}  // namespace packserve::model
