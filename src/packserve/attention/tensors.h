// tensors.h: host views of the Q/K/V tensors a BatchLayout describes (batch_layout.h), as
// the CPU executor (run_cpu.h) and the float64 reference (reference.h) read them.
//
//   q        [total_rows, num_qo_heads, head_dim]            elements of layout.dtype
//   k_pages  [num_pages, page_size, num_kv_heads, head_dim]  elements of layout.kv_dtype()
//   v_pages  same shape as k_pages
// f16/bf16 elements are their 16-bit patterns, e4m3 ones their bytes (common/dtype.h). With
// kv_fp8 a key is e4m3_value(byte) * k_scale and a value e4m3_value(byte) * v_scale (a float8
// KV cache's per-layer scales); without it both scales are 1. Scores are sm_scale * dot(q, k)
// (natural-log domain; lse values elsewhere are base 2).
// Thread-safety: a view; the viewed buffers must outlive it and stay unchanged while used.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include "packserve/attention/batch_layout.h"
#include "packserve/common/dtype.h"
#include "packserve/common/status.h"

namespace packserve::attention {

struct AttentionTensors {
  std::span<const std::byte> q;
  std::span<const std::byte> k_pages;
  std::span<const std::byte> v_pages;
  float sm_scale = 0.0f;  // softmax scale, usually 1 / sqrt(head_dim)
  float k_scale = 1.0f;   // kv_fp8: a key is its byte's e4m3 value times k_scale; else 1
  float v_scale = 1.0f;   // kv_fp8: a value is its byte's e4m3 value times v_scale; else 1
};

// kInvalidArgument naming the tensor when a size does not match the layout (which must have
// passed validate()), naming the field when sm_scale is not finite and > 0, or k_scale /
// v_scale is not finite and > 0 (with kv_fp8) or not 1 (without).
inline Status check_tensors(const BatchLayout& layout, const AttentionTensors& tensors) {
  const auto check = [&](std::span<const std::byte> t, size_t elements, DType dtype,
                         const char* name) {
    const size_t elem = dtype_size_bytes(dtype);
    if (t.size() != elements * elem) {
      return invalid_argument(std::string(name) + ": " + std::to_string(t.size()) +
                              " bytes, expected " + std::to_string(elements * elem) + " (" +
                              std::to_string(elements) + " elements of " +
                              std::string(dtype_name(dtype)) + ")");
    }
    return ok_status();
  };
  PS_RETURN_IF_ERROR(check(tensors.q, layout.q_elements(), layout.dtype, "q"));
  PS_RETURN_IF_ERROR(
      check(tensors.k_pages, layout.kv_page_elements(), layout.kv_dtype(), "k_pages"));
  PS_RETURN_IF_ERROR(
      check(tensors.v_pages, layout.kv_page_elements(), layout.kv_dtype(), "v_pages"));
  if (!(tensors.sm_scale > 0.0f) || tensors.sm_scale > 1e30f) {
    return invalid_argument("sm_scale = " + std::to_string(tensors.sm_scale) +
                            ": expected a finite value > 0");
  }
  for (const auto& [scale, name] :
       {std::pair{tensors.k_scale, "k_scale"}, std::pair{tensors.v_scale, "v_scale"}}) {
    if (layout.kv_fp8 ? !(scale > 0.0f && std::isfinite(scale)) : scale != 1.0f) {
      return invalid_argument(std::string(name) + " = " + std::to_string(scale) +
                              (layout.kv_fp8 ? ": expected a finite value > 0"
                                             : ": expected 1 (the pages are not float8)"));
    }
  }
  return ok_status();
}

}  // namespace packserve::attention
