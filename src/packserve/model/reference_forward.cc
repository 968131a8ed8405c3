#include "packserve/model/reference_forward.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "packserve/model/ops_cpu.h"

namespace packserve::model {
namespace {

using Vec = std::vector<double>;

Vec to_f64(const HostTensor& t) {
  Vec v(static_cast<size_t>(t.present() ? t.num_elements() : 0));
  for (size_t i = 0; i < v.size(); ++i) v[i] = t.at(static_cast<int64_t>(i));
  return v;
}

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w, rows of width w.size().
Vec rms(const Vec& x, const Vec& w, double eps) {
  const size_t d = w.size();
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / d; ++r) {
    double ss = 0.0;
    for (size_t i = 0; i < d; ++i) ss += x[r * d + i] * x[r * d + i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    for (size_t i = 0; i < d; ++i) y[r * d + i] = x[r * d + i] * inv * w[i];
  }
  return y;
}

// y [rows, out] = x [rows, in] * w^T (+ b), w [out, in].
Vec matmul_t(const Vec& x, size_t rows, size_t in, const Vec& w, size_t out, const Vec& b) {
  Vec y(rows * out);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[o];
      for (size_t i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
  }
  return y;
}

// Rotates x [rows, heads, d] in place, row r at position r, cos and sin times attention_factor.
void rope(Vec& x, size_t rows, size_t heads, size_t d, const Vec& inv_freq,
          double attention_factor) {
  const size_t half = d / 2;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t h = 0; h < heads; ++h) {
      double* v = &x[(r * heads + h) * d];
      for (size_t p = 0; p < half; ++p) {
        const double angle = static_cast<double>(r) * inv_freq[p];
        const double c = std::cos(angle) * attention_factor;
        const double s = std::sin(angle) * attention_factor;
        const double a = v[p];
        const double b = v[p + half];
        v[p] = a * c - b * s;
        v[p + half] = b * c + a * s;
      }
    }
  }
}

}  // namespace

Result<std::vector<double>> reference_forward(const ModelWeights& weights,
                                              std::span<const int32_t> token_ids) {
  PS_RETURN_IF_ERROR(validate_weights(weights));
  const ModelConfig& c = weights.config;
  if (token_ids.empty()) return invalid_argument("token_ids: expected at least one token");
  for (size_t i = 0; i < token_ids.size(); ++i) {
    if (token_ids[i] < 0 || token_ids[i] >= c.vocab_size) {
      return invalid_argument(
          "token_ids[" + std::to_string(i) + "] = " + std::to_string(token_ids[i]) +
          ": expected in [0, vocab_size = " + std::to_string(c.vocab_size) + ")");
    }
  }
  const size_t n = token_ids.size();
  const size_t hid = static_cast<size_t>(c.hidden_size);
  const size_t inter = static_cast<size_t>(c.intermediate_size);
  const size_t nq = static_cast<size_t>(c.num_qo_heads);
  const size_t nkv = static_cast<size_t>(c.num_kv_heads);
  const size_t d = static_cast<size_t>(c.head_dim);
  const size_t group = nq / nkv;
  const double eps = c.rms_norm_eps;
  const Vec inv_freq = rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling);
  const double attention_factor = rope_attention_factor(c.rope_scaling);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));

  const Vec embed = to_f64(weights.embed_tokens);
  Vec x(n * hid);
  for (size_t t = 0; t < n; ++t) {
    for (size_t i = 0; i < hid; ++i) x[t * hid + i] = embed[token_ids[t] * hid + i];
  }
  for (const LayerWeights& l : weights.layers) {
    const Vec h = rms(x, to_f64(l.input_norm), eps);
    Vec q = matmul_t(h, n, hid, to_f64(l.q_proj), nq * d, to_f64(l.q_bias));
    Vec k = matmul_t(h, n, hid, to_f64(l.k_proj), nkv * d, to_f64(l.k_bias));
    const Vec v = matmul_t(h, n, hid, to_f64(l.v_proj), nkv * d, to_f64(l.v_bias));
    if (c.qk_norm) {
      q = rms(q, to_f64(l.q_norm), eps);
      k = rms(k, to_f64(l.k_norm), eps);
    }
    rope(q, n, nq, d, inv_freq, attention_factor);
    rope(k, n, nkv, d, inv_freq, attention_factor);
    Vec attn(n * nq * d, 0.0);
    for (size_t t = 0; t < n; ++t) {
      for (size_t hq = 0; hq < nq; ++hq) {
        const size_t hk = hq / group;
        const double* qv = &q[(t * nq + hq) * d];
        Vec s(t + 1);
        double m = -INFINITY;
        for (size_t j = 0; j <= t; ++j) {
          double dot = 0.0;
          for (size_t e = 0; e < d; ++e) dot += qv[e] * k[(j * nkv + hk) * d + e];
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        double sum = 0.0;
        for (double& sj : s) sum += (sj = std::exp(sj - m));
        double* out = &attn[(t * nq + hq) * d];
        for (size_t j = 0; j <= t; ++j) {
          for (size_t e = 0; e < d; ++e) out[e] += s[j] / sum * v[(j * nkv + hk) * d + e];
        }
      }
    }
    const Vec o = matmul_t(attn, n, nq * d, to_f64(l.o_proj), hid, {});
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    const Vec h2 = rms(x, to_f64(l.post_attention_norm), eps);
    const Vec gate = matmul_t(h2, n, hid, to_f64(l.gate_proj), inter, {});
    const Vec up = matmul_t(h2, n, hid, to_f64(l.up_proj), inter, {});
    Vec act(n * inter);
    for (size_t i = 0; i < act.size(); ++i) act[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
    const Vec down = matmul_t(act, n, inter, to_f64(l.down_proj), hid, {});
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  const Vec xf = rms(x, to_f64(weights.final_norm), eps);
  return matmul_t(xf, n, hid, to_f64(weights.lm_head), static_cast<size_t>(c.vocab_size), {});
}

}  // namespace packserve::model
