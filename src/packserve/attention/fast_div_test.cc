// fast_div_test.cc: the kernel's page-size divider (cuda/fast_div.h, plain C++ on the host)
// against integer division: every divisor 1..1024 (page sizes are 1..256) over dense and edge
// numerators, and random divisors and numerators over the whole int32 range it promises.
#include "packserve/attention/cuda/fast_div.h"

#include <gtest/gtest.h>

#include <climits>
#include <vector>

#include "packserve/common/rng.h"

namespace packserve::attention::cuda {
namespace {

void expect_divides(const FastDiv& f, int32_t n) {
  const int32_t q = f.div(n);
  ASSERT_EQ(q, n / f.divisor) << n << " / " << f.divisor;
  ASSERT_EQ(f.mod(n, q), n % f.divisor) << n << " % " << f.divisor;
}

TEST(FastDiv, EveryPageSizeOverDenseAndEdgeNumerators) {
  for (int32_t d = 1; d <= 1024; ++d) {
    const FastDiv f = FastDiv::make(d);
    for (int32_t n = 0; n < 70000; ++n) expect_divides(f, n);
    for (int32_t n : {INT_MAX, INT_MAX - 1, INT_MAX - d, INT_MAX / d * d, INT_MAX / d * d - 1,
                      (1 << 30), (1 << 30) - 1, (1 << 24) * 3 + 7}) {
      expect_divides(f, n);
    }
  }
}

TEST(FastDiv, RandomDivisorsAndNumerators) {
  Rng rng(20261123);
  for (int i = 0; i < 2000; ++i) {
    const int32_t d = 1 + static_cast<int32_t>(rng.next_u64() % INT_MAX);
    const FastDiv f = FastDiv::make(d);
    for (int j = 0; j < 500; ++j)
      expect_divides(f, static_cast<int32_t>(rng.next_u64() % (uint64_t{INT_MAX} + 1)));
    for (int32_t n : {0, 1, d - 1, d, INT_MAX}) expect_divides(f, n);
  }
}

TEST(FastDiv, PowersOfTwoAreShifts) {
  for (int l = 0; l < 31; ++l) {
    const FastDiv f = FastDiv::make(int32_t{1} << l);
    EXPECT_EQ(f.shift, static_cast<uint32_t>(l));
    EXPECT_EQ(f.magic, 1u);
  }
}

}  // namespace
}  // namespace packserve::attention::cuda
