// reference.cc: float64 naive attention (reference.h). Deliberately simple: per request and
// KV head, its keys/values are looked up through its page table into a dense double array;
// then one (row, qo head) at a time, a max-subtracted softmax over keys 0..position in double.
#include "packserve/attention/reference.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace packserve::attention {

Result<std::vector<double>> reference_attention(const BatchLayout& layout,
                                                const AttentionTensors& tensors) {
  PS_RETURN_IF_ERROR(validate(layout));
  PS_RETURN_IF_ERROR(check_tensors(layout, tensors));
  const int num_heads = layout.num_qo_heads;
  const int d_head = layout.head_dim;
  const DType dtype = layout.dtype, kv_dtype = layout.kv_dtype();
  // 1 without kv_fp8 (check_tensors); the products are exact in double.
  const double k_scale = tensors.k_scale, v_scale = tensors.v_scale;
  std::vector<double> out(layout.q_elements(), 0.0);
  std::vector<double> q(d_head), scores, k, v;
  for (int r = 0; r < layout.batch_size(); ++r) {
    const int kv_len = layout.kv_len(r);
    for (int kv_head = 0; kv_head < layout.num_kv_heads; ++kv_head) {
      // This request's keys and values of this head, looked up position by position through
      // its page table: k[j * d_head + d] is dim d of the key at position j.
      k.resize(static_cast<size_t>(kv_len) * d_head);
      v.resize(k.size());
      for (int j = 0; j < kv_len; ++j) {
        const size_t base =
            ((static_cast<size_t>(layout.page_of(r, j)) * layout.page_size + j % layout.page_size) *
                 layout.num_kv_heads +
             kv_head) *
            d_head;
        for (int d = 0; d < d_head; ++d) {
          k[static_cast<size_t>(j) * d_head + d] =
              load_as_float(tensors.k_pages.data(), base + d, kv_dtype) * k_scale;
          v[static_cast<size_t>(j) * d_head + d] =
              load_as_float(tensors.v_pages.data(), base + d, kv_dtype) * v_scale;
        }
      }
      for (int i = 0; i < layout.q_len(r); ++i) {
        const int row = layout.qo_indptr[r] + i;
        const int position = layout.row_position(r, i);  // sees keys 0 .. position
        for (int g = 0; g < layout.group_size(); ++g) {
          const int h = kv_head * layout.group_size() + g;
          const size_t q_base = (static_cast<size_t>(row) * num_heads + h) * d_head;
          for (int d = 0; d < d_head; ++d) {
            q[d] = load_as_float(tensors.q.data(), q_base + d, dtype);
          }
          scores.assign(position + 1, 0.0);
          for (int j = 0; j <= position; ++j) {
            const double* kj = k.data() + static_cast<size_t>(j) * d_head;
            double dot = 0.0;
            for (int d = 0; d < d_head; ++d) dot += q[d] * kj[d];
            scores[j] = static_cast<double>(tensors.sm_scale) * dot;
          }
          const double max_score = *std::max_element(scores.begin(), scores.end());
          double sum = 0.0;
          for (double& s : scores) {
            s = std::exp(s - max_score);
            sum += s;
          }
          double* o = out.data() + q_base;
          for (int j = 0; j <= position; ++j) {
            const double* vj = v.data() + static_cast<size_t>(j) * d_head;
            const double w = scores[j] / sum;
            for (int d = 0; d < d_head; ++d) o[d] += w * vj[d];
          }
        }
      }
    }
  }
  return out;
}

OutputComparison compare_with_reference(const BatchLayout& layout, std::span<const float> out,
                                        std::span<const double> ref, double atol, double rtol) {
  PS_CHECK(out.size() == layout.q_elements() && ref.size() == layout.q_elements())
      << out.size() << " " << ref.size() << " " << layout.q_elements();
  OutputComparison c;
  const double rel_floor = rtol > 0 ? atol / rtol : 0.0;
  for (size_t e = 0; e < out.size(); ++e) {
    const double x = out[e];
    const double err = std::abs(x - ref[e]);
    const double tol = atol + rtol * std::abs(ref[e]);
    const bool finite = std::isfinite(x);
    if (finite) {
      c.max_abs_err = std::max(c.max_abs_err, err);
      if (std::abs(ref[e]) >= rel_floor && ref[e] != 0.0) {
        c.max_rel_err = std::max(c.max_rel_err, err / std::abs(ref[e]));
      }
      if (tol > 0) c.max_err_ratio = std::max(c.max_err_ratio, err / tol);
    } else {
      ++c.num_nonfinite;
    }
    if (finite && err <= tol) continue;
    ++c.num_failed;
    if (c.ok) {
      c.ok = false;
      const size_t d_head = static_cast<size_t>(layout.head_dim);
      const int row = static_cast<int>(e / (d_head * layout.num_qo_heads));
      const int head = static_cast<int>(e / d_head % layout.num_qo_heads);
      const int r = request_of_row(layout, row);
      std::ostringstream s;
      s.precision(9);
      s << "request " << r << " row " << row - layout.qo_indptr[r] << " (global " << row
        << ") head " << head << " dim " << e % d_head << ": out = " << x << ", ref = " << ref[e]
        << ", |err| = " << err << " > tol = " << tol;
      c.first_failure = s.str();
    }
  }
  return c;
}

}  // namespace packserve::attention
