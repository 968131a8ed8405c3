// merge.cc: LSE composition (merge.h). f32 arithmetic, fixed operation order.
#include "packserve/attention/merge.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "packserve/common/status.h"

namespace packserve::attention {

void merge_state_into(std::span<float> o, float& lse, std::span<const float> o_other,
                      float lse_other) {
  PS_CHECK(o.size() == o_other.size()) << o.size() << " vs " << o_other.size();
  const float m = std::max(lse, lse_other);
  if (m == -std::numeric_limits<float>::infinity()) {  // both empty: stays empty
    std::fill(o.begin(), o.end(), 0.0f);
    lse = m;
    return;
  }
  const float w_self = std::exp2(lse - m);  // 0 for an empty side (exp2(-inf) = 0)
  const float w_other = std::exp2(lse_other - m);
  const float sum = w_self + w_other;  // >= 1: the larger side has weight exactly 1
  const float a = w_self / sum;
  const float b = w_other / sum;
  for (size_t d = 0; d < o.size(); ++d) o[d] = a * o[d] + b * o_other[d];
  lse = m + std::log2(sum);
}

void merge_states(std::span<const std::span<const float>> o_parts, std::span<const float> lse_parts,
                  std::span<float> o_out, float& lse_out) {
  PS_CHECK(o_parts.size() == lse_parts.size()) << o_parts.size() << " vs " << lse_parts.size();
  std::fill(o_out.begin(), o_out.end(), 0.0f);
  lse_out = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < o_parts.size(); ++i) {
    merge_state_into(o_out, lse_out, o_parts[i], lse_parts[i]);
  }
}

}  // namespace packserve::attention
