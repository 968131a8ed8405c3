// argmax.cc: see argmax.h.
#include "packserve/common/argmax.h"

#include <algorithm>
#include <limits>

#include "packserve/common/target_clones.h"

namespace packserve {

namespace {
constexpr float kNegInfF = -std::numeric_limits<float>::infinity();
}  // namespace

// `x > m ? x : m` is NaN-safe; eight independent lanes let it vectorize (maxps).
PACKSERVE_AVX2_CLONES
float max_ignoring_nan(std::span<const float> x) {
  float lanes[8];
  std::fill(lanes, lanes + 8, kNegInfF);
  const float* p = x.data();
  const size_t n = x.size();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t l = 0; l < 8; ++l) lanes[l] = p[i + l] > lanes[l] ? p[i + l] : lanes[l];
  }
  float m = kNegInfF;
  for (; i < n; ++i) m = p[i] > m ? p[i] : m;
  for (float lane : lanes) m = lane > m ? lane : m;
  return m;
}

int32_t first_index_of_max(std::span<const float> x, float m) {
  if (m == kNegInfF) return 0;  // nothing above -inf: the first index, as ties go
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == m) return static_cast<int32_t>(i);
  }
  return 0;  // unreachable when m = max_ignoring_nan(x)
}

int32_t argmax_lowest(std::span<const float> x) {
  return first_index_of_max(x, max_ignoring_nan(x));
}

}  // namespace packserve
