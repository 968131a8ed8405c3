#include "packserve/common/dtype.h"

#include <cmath>
#include <limits>
#include <string>

namespace packserve {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kFP8E4M3: return "fp8_e4m3";
  }
  return "?";
}

Result<DType> parse_dtype(std::string_view name) {
  if (name == "f32" || name == "float32") return DType::kF32;
  if (name == "f16" || name == "float16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  return invalid_argument("dtype: expected one of \"f32\", \"f16\", \"bf16\", got \"" +
                          std::string(name) + "\"");
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) {
    return bits_float(sign | 0x7f800000u | (mantissa << 13));
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t float_to_f16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): value / 2^-24, rounded to nearest even.
    const float scaled = bits_float(abs) * 16777216.0f;  // exact: power-of-two scaling
    const float rounded = std::nearbyint(scaled);        // default mode: to nearest even
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(rounded));
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t value = abs - (112u << 23);
  const uint32_t rounding = 0xfffu + ((value >> 13) & 1u);
  value += rounding;
  return static_cast<uint16_t>(sign | (value >> 13));
}

float e4m3_value(uint8_t byte) {
  const int exponent = (byte >> 3) & 0xF, mantissa = byte & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  const float magnitude = exponent == 0
                              ? std::ldexp(static_cast<float>(mantissa), -9)
                              : std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
  return (byte & 0x80) != 0 ? -magnitude : magnitude;
}

uint8_t e4m3_from_float(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= 448.0f) return sign | 0x7E;
  // The grid step in a's binade e (a in [2^e, 2^(e+1))) is 2^(e - 3), and 2^-9 below the
  // smallest normal 2^-6. a / step is exact (a power-of-two scaling); rounding it to an
  // integer, ties to even, rounds a.
  int exponent = 0;
  (void)std::frexp(a, &exponent);                 // a = f * 2^exponent, f in [0.5, 1)
  const int e = a < 0x1p-6f ? -6 : exponent - 1;  // a's binade; the subnormals' below 2^-6
  const float units = std::nearbyint(std::ldexp(a, 3 - e));  // in [0, 16]: 8 + mantissa
  if (e == -6 && units < 8.0f) return sign | static_cast<uint8_t>(units);  // subnormal
  // units == 16 carries into the next binade (mantissa 0).
  const int binade = units == 16.0f ? e + 1 : e;
  const int mantissa = units == 16.0f ? 0 : static_cast<int>(units) - 8;
  return sign | static_cast<uint8_t>(((binade + 7) << 3) | mantissa);
}

float round_to_dtype(float f, DType dtype) {
  switch (dtype) {
    case DType::kF32: return f;
    case DType::kF16: return f16_to_float(float_to_f16(f));
    case DType::kBF16: return bf16_to_float(float_to_bf16(f));
    case DType::kFP8E4M3: return e4m3_value(e4m3_from_float(f));
  }
  return f;
}

float load_as_float(const std::byte* data, size_t i, DType dtype) {
  if (dtype == DType::kFP8E4M3) return e4m3_value(static_cast<uint8_t>(data[i]));
  if (dtype == DType::kF32) {
    float f;
    std::memcpy(&f, data + i * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, data + i * 2, 2);
  return dtype == DType::kF16 ? f16_to_float(h) : bf16_to_float(h);
}

void store_from_float(std::byte* data, size_t i, DType dtype, float f) {
  if (dtype == DType::kFP8E4M3) {
    data[i] = static_cast<std::byte>(e4m3_from_float(f));
    return;
  }
  if (dtype == DType::kF32) {
    std::memcpy(data + i * 4, &f, 4);
    return;
  }
  const uint16_t h = dtype == DType::kF16 ? float_to_f16(f) : float_to_bf16(f);
  std::memcpy(data + i * 2, &h, 2);
}

}  // namespace packserve
