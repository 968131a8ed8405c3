// argmax_test.cc: the argmax rules of argmax.h.
#include "packserve/common/argmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace packserve {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(Argmax, TiesGoToTheLowestIndex) {
  EXPECT_EQ(argmax_lowest(std::vector<float>{1.0f, 3.0f, 2.0f, 3.0f}), 1);
  // Across the vectorized lanes and the tail: the maximum at 5 and 17 of 19.
  std::vector<float> x(19, -2.0f);
  x[17] = 4.0f;
  x[5] = 4.0f;
  EXPECT_EQ(argmax_lowest(x), 5);
  x[5] = 3.0f;
  EXPECT_EQ(argmax_lowest(x), 17);
}

TEST(Argmax, NanNeverWins) {
  EXPECT_EQ(argmax_lowest(std::vector<float>{NAN, -1.0f, NAN}), 1);
  EXPECT_EQ(max_ignoring_nan(std::vector<float>{NAN, -1.0f, NAN}), -1.0f);
}

TEST(Argmax, AllNanOrMinusInfIsIndexZero) {
  EXPECT_EQ(argmax_lowest(std::vector<float>{NAN, -kInf, NAN}), 0);
  EXPECT_EQ(argmax_lowest(std::vector<float>{-kInf, -kInf}), 0);
  EXPECT_EQ(max_ignoring_nan(std::vector<float>{}), -kInf);
}

TEST(Argmax, PlusInfWinsAndSignedZerosTie) {
  EXPECT_EQ(argmax_lowest(std::vector<float>{1.0f, kInf, 2.0f, kInf}), 1);
  EXPECT_EQ(argmax_lowest(std::vector<float>{-1.0f, -0.0f, 0.0f}), 1);
  EXPECT_EQ(argmax_lowest(std::vector<float>{-1.0f, 0.0f, -0.0f}), 1);
}

}  // namespace
}  // namespace packserve
