#include "packserve/common/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace packserve {
namespace {

TEST(DType, ParsesNamesAndRejectsUnknown) {
  EXPECT_EQ(parse_dtype("bf16").value(), DType::kBF16);
  EXPECT_EQ(parse_dtype("float16").value(), DType::kF16);
  EXPECT_EQ(parse_dtype("f32").value(), DType::kF32);
  const auto bad = parse_dtype("fp8");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("fp8"), std::string::npos);
}

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies exactly between bf16 neighbours 1 and 1 + 2^-7: ties go to the even (1).
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 0x1.0p-8f)), 1.0f);
  // 1 + 3*2^-8 lies between 1 + 2^-7 and 1 + 2^-6: tie goes to even mantissa (1 + 2^-6).
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3 * 0x1.0p-8f)), 1.0f + 0x1.0p-6f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, F16RoundTripsEveryPattern) {
  // Every finite f16 pattern survives f16 -> float -> f16 exactly.
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    if ((bits & 0x7c00u) == 0x7c00u) continue;  // inf/NaN
    ASSERT_EQ(float_to_f16(f16_to_float(bits)), bits) << "pattern " << h;
  }
}

TEST(DType, F16RoundsToNearestEvenAndOverflows) {
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f + 0x1.0p-11f)), 1.0f);  // tie -> even
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f + 3 * 0x1.0p-11f)), 1.0f + 0x1.0p-9f);
  EXPECT_EQ(f16_to_float(float_to_f16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_float(float_to_f16(70000.0f))));
  EXPECT_EQ(f16_to_float(float_to_f16(0x1.0p-24f)), 0x1.0p-24f);  // smallest subnormal
  EXPECT_EQ(f16_to_float(float_to_f16(0x1.0p-26f)), 0.0f);         // below half of it
}

TEST(DType, LoadStoreRoundTrip) {
  std::byte buffer[8] = {};
  store_from_float(buffer, 1, DType::kBF16, 3.0f);
  EXPECT_EQ(load_as_float(buffer, 1, DType::kBF16), 3.0f);
  store_from_float(buffer, 1, DType::kF32, 0.1f);
  EXPECT_EQ(load_as_float(buffer, 1, DType::kF32), 0.1f);
  EXPECT_EQ(round_to_dtype(0.1f, DType::kF16), f16_to_float(float_to_f16(0.1f)));
}

// The float8 storage type: one byte, e4m3 (its byte conversions are tested bit for bit in
// model/fp8_weights_test.cc), never a parsed compute dtype.
TEST(DType, Fp8E4m3IsAOneByteStorageType) {
  EXPECT_EQ(dtype_size_bytes(DType::kFP8E4M3), 1u);
  EXPECT_EQ(dtype_name(DType::kFP8E4M3), "fp8_e4m3");
  EXPECT_FALSE(parse_dtype("fp8_e4m3").ok());
  std::byte buffer[4] = {};
  store_from_float(buffer, 2, DType::kFP8E4M3, 1.3f);  // e4m3 neighbours 1.25 and 1.375
  EXPECT_EQ(static_cast<uint8_t>(buffer[2]), 0x3A);
  EXPECT_EQ(load_as_float(buffer, 2, DType::kFP8E4M3), 1.25f);
  EXPECT_EQ(static_cast<uint8_t>(buffer[1]), 0u);  // the neighbours untouched
  EXPECT_EQ(round_to_dtype(1000.0f, DType::kFP8E4M3), 448.0f);  // saturated
  store_from_float(buffer, 0, DType::kFP8E4M3, std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(load_as_float(buffer, 0, DType::kFP8E4M3)));
}

}  // namespace
}  // namespace packserve
