#include "packserve/common/dtype.h"

#include <cmath>
#include <string>

namespace packserve {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
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

float round_to_dtype(float f, DType dtype) {
  switch (dtype) {
    case DType::kF32: return f;
    case DType::kF16: return f16_to_float(float_to_f16(f));
    case DType::kBF16: return bf16_to_float(float_to_bf16(f));
  }
  return f;
}

float load_as_float(const std::byte* data, size_t i, DType dtype) {
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
  if (dtype == DType::kF32) {
    std::memcpy(data + i * 4, &f, 4);
    return;
  }
  const uint16_t h = dtype == DType::kF16 ? float_to_f16(f) : float_to_bf16(f);
  std::memcpy(data + i * 2, &h, 2);
}

}  // namespace packserve
