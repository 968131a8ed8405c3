// kv_cache_dtype.h: the element type of a forward backend's KV pool, a plain enum so that the
// backend options and the command line name it without a CUDA header (docs/forward-cuda.md
// "Float8 KV cache"; the CPU backend: forward_cpu.h).
#pragma once

#include <cstddef>
#include <string_view>

namespace packserve::model {

enum class KvCacheDtype {
  kAuto,  // the activations' type: bf16 on the CUDA backend, f32 on the CPU one
  // float8 e4m3, one byte per element: each new K (V) value is divided by its layer's k_scale
  // (v_scale) and rounded to e4m3, saturating at +-448, as vLLM's --kv-cache-dtype fp8. The
  // scales are a float8 checkpoint's calibrated ones (weights.h LayerWeights), else 1. Half the
  // CUDA pool's bytes per token, so twice the tokens in the same memory; a quarter of the CPU
  // pool's (f32). Attention reads the pages through the attention engine's float8 path
  // (attention/cuda/run_cuda.h, DeviceBatch::kv_fp8; on the CPU attention/run_cpu.h).
  kFp8E4m3,
};

// The canonical name (parse_kv_cache_dtype of backend_factory.h also takes "fp8"): "auto" or
// "fp8_e4m3".
inline constexpr std::string_view kv_cache_dtype_name(KvCacheDtype d) {
  return d == KvCacheDtype::kFp8E4m3 ? "fp8_e4m3" : "auto";
}

// Bytes of one K or V element in the CUDA backend's pool: its allocation and the factory's
// sizing.
inline constexpr std::size_t kv_cache_element_bytes(KvCacheDtype d) {
  return d == KvCacheDtype::kFp8E4m3 ? 1 : 2;
}

// Bytes of one K or V element in the CPU backend's pool (f32 or an e4m3 byte).
inline constexpr std::size_t cpu_kv_cache_element_bytes(KvCacheDtype d) {
  return d == KvCacheDtype::kFp8E4m3 ? 1 : 4;
}

}  // namespace packserve::model
