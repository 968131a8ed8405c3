// reference.h: the oracle. Float64 naive attention computed straight from each request's
// page table (DESIGN.md "Data model"), untiled and unsplit: query row i of request r, qo head
// h, sees keys at positions 0 .. kv_len[r] - q_len[r] + i of its own page list, read from KV
// head h / group_size;
//   out[row, h, :] = sum_j softmax_j(sm_scale * q·k_j) * v_j
// computed in double on the stored (already rounded) inputs, so it is the exact attention of
// the values a kernel sees, up to float64 rounding. Float8 pages (kv_fp8): k_j and v_j are the
// bytes' e4m3 values times k_scale and v_scale (tensors.h), multiplied in double.
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "packserve/attention/batch_layout.h"
#include "packserve/attention/tensors.h"
#include "packserve/common/status.h"

namespace packserve::attention {

// Returns out [total_rows, num_qo_heads, head_dim] in double. kInvalidArgument when the layout
// fails validate() or a tensor size does not match.
Result<std::vector<double>> reference_attention(const BatchLayout& layout,
                                                const AttentionTensors& tensors);

// Per-element comparison of an output with the reference: element e passes iff
// |out[e] - ref[e]| <= atol + rtol * |ref[e]| (a NaN or inf output never passes).
struct OutputComparison {
  bool ok = true;
  int64_t num_failed = 0;     // elements outside the tolerance (non-finite ones included)
  int64_t num_nonfinite = 0;  // NaN / inf outputs
  double max_abs_err = 0.0;   // max |out - ref| over finite outputs
  // max |out - ref| / |ref| over finite outputs with |ref| >= atol / rtol, where the relative
  // term dominates the tolerance (near-zero references would make the ratio meaningless).
  double max_rel_err = 0.0;
  double max_err_ratio = 0.0;  // max |out - ref| / (atol + rtol * |ref|); ok iff <= 1
  // The first failing element as (request, row within the request, qo head, dim) plus
  // values, e.g. "request 2 row 5 head 3 dim 17: out = nan, ref = 0.1234"; empty when ok.
  std::string first_failure;
};
// out and ref: [total_rows, num_qo_heads, head_dim] of a layout that passed validate().
OutputComparison compare_with_reference(const BatchLayout& layout, std::span<const float> out,
                                        std::span<const double> ref, double atol, double rtol);

}  // namespace packserve::attention
