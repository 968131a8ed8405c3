#include "packserve/common/status.h"

#include <gtest/gtest.h>

namespace packserve {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("v: expected > 0, got " + std::to_string(v));
  return v;
}

Result<int> doubled(int v) {
  PS_ASSIGN_OR_RETURN(int x, parse_positive(v));
  return 2 * x;
}

Status check_both(int a, int b) {
  PS_RETURN_IF_ERROR(parse_positive(a).status());
  PS_RETURN_IF_ERROR(parse_positive(b).status());
  return ok_status();
}

TEST(Status, PropagatesErrorsAndValues) {
  EXPECT_EQ(doubled(4).value(), 8);
  const auto bad = doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().to_string(), "INVALID_ARGUMENT: v: expected > 0, got -1");
  EXPECT_TRUE(check_both(1, 2).ok());
  EXPECT_EQ(check_both(1, 0).message(), "v: expected > 0, got 0");
}

TEST(Status, ResultFromOkStatusIsAnError) {
  Result<int> r{ok_status()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(StatusDeathTest, CheckAbortsWithValues) {
  const int a = 3;
  EXPECT_DEATH({ PS_CHECK(a == 4) << "a=" << a; }, "a=3");
}

}  // namespace
}  // namespace packserve
