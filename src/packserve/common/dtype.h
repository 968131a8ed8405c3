// dtype.h: element types of Q/K/V and their host-side bit conversions.
//
// On the CPU, f16 and bf16 values are stored as their 16-bit patterns (uint16_t), float8 e4m3
// values as their bytes; every conversion here rounds to nearest even, as the GPU's cvt.rn
// does, so a CPU reference computed on "the same rounded inputs" sees exactly the values a
// kernel sees. kFP8E4M3 is a storage type only (a float8 KV cache, float8 weights): it is never
// a model's or a batch's compute dtype, and parse_dtype does not accept it.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "packserve/common/status.h"

namespace packserve {

enum class DType : uint8_t { kF32, kF16, kBF16, kFP8E4M3 };

constexpr size_t dtype_size_bytes(DType dtype) {
  return dtype == DType::kF32 ? 4 : (dtype == DType::kFP8E4M3 ? 1 : 2);
}
std::string_view dtype_name(DType dtype);  // "f32", "f16", "bf16", "fp8_e4m3"
// Parses "f32" | "f16" | "bf16" (also "float32", "float16", "bfloat16").
Result<DType> parse_dtype(std::string_view name);

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }
inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN, keep the sign
  }
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);  // round to nearest even; overflow -> inf

// float8 e4m3, the OCP "FN" variant (bias 7, subnormals, no infinities, S.1111.111 = NaN).
// The value of an e4m3 byte (NaN for 0x7F and 0xFF).
float e4m3_value(uint8_t byte);
// The e4m3 byte nearest x (ties to even), saturated to +-448; NaN -> 0x7F.
uint8_t e4m3_from_float(float x);

// Rounds f to the nearest value representable in `dtype` (identity for f32).
float round_to_dtype(float f, DType dtype);
// Reads element i of a buffer of `dtype` elements as float.
float load_as_float(const std::byte* data, size_t i, DType dtype);
// Writes f (rounded) as element i of a buffer of `dtype` elements.
void store_from_float(std::byte* data, size_t i, DType dtype, float f);

}  // namespace packserve
