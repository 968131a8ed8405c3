// batch_layout.h: the attention engine's view of one step's batch (DESIGN.md "The attention
// engine", seed 004 §3.1): ragged queries plus a paged KV cache, in CSR form.
//
//   q        [total_rows, num_qo_heads, head_dim]              rows of request r are
//                                                              qo_indptr[r] .. qo_indptr[r+1)
//   k_pages  [num_pages, page_size, num_kv_heads, head_dim]    same for v_pages
//   request r owns pages kv_page_indices[kv_page_indptr[r] .. kv_page_indptr[r+1]); its last
//   page holds kv_last_page_len[r] tokens, so
//     kv_len[r] = (num_pages_of(r) - 1) * page_size + kv_last_page_len[r]
//   query row i of request r sits at position kv_len[r] - q_len[r] + i and sees the keys at
//   positions <= its own (causal). Prefill chunks (q_len > 1, possibly after earlier chunks
//   already in the cache) and decode rows (q_len = 1) sit side by side.
//
// Identical leading page ids across requests are a physically shared prefix: the planner's
// prefix policy reads them once. A BatchLayout never sees requests, sequences or scheduler
// state. Invariants are established by validate(); every other function in attention/
// assumes a layout that passed it. Thread-safety: a value; const access is thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "packserve/common/dtype.h"
#include "packserve/common/status.h"

namespace packserve::attention {

// Head dims with compiled kernels; the CPU executor accepts the same set.
inline constexpr int kSupportedHeadDims[] = {64, 128, 256};
inline constexpr int kMinPageSize = 1;
inline constexpr int kMaxPageSize = 256;
// The largest query tile folds at most this many (row, qo head) pairs; a GQA group must fit.
inline constexpr int kMaxGroupSize = 128;

struct BatchLayout {
  int num_qo_heads = 0;        // query/output heads
  int num_kv_heads = 0;        // K/V heads; group_size = num_qo_heads / num_kv_heads
  int head_dim = 0;            // 64, 128 or 256
  int page_size = 0;           // tokens per page, 1..256
  int num_pages = 0;           // pages in the pool; every page index must be < num_pages
  DType dtype = DType::kBF16;  // Q and output element type; K and V too unless kv_fp8
  // K and V pages hold float8 e4m3 bytes (a float8 KV cache) instead of `dtype` elements;
  // their values times AttentionTensors::k_scale / v_scale (tensors.h, 1 by default) are the
  // keys and values. Any dtype: the CPU executor takes f32 too (the CPU backend's f32 queries),
  // the CUDA kernels only f16 / bf16, as without kv_fp8.
  bool kv_fp8 = false;

  std::vector<int32_t> qo_indptr;         // [batch_size + 1], qo_indptr[0] = 0
  std::vector<int32_t> kv_page_indptr;    // [batch_size + 1], kv_page_indptr[0] = 0
  std::vector<int32_t> kv_page_indices;   // [kv_page_indptr[batch_size]]
  std::vector<int32_t> kv_last_page_len;  // [batch_size], each in [1, page_size]

  DType kv_dtype() const { return kv_fp8 ? DType::kFP8E4M3 : dtype; }  // of k_pages, v_pages
  int batch_size() const { return static_cast<int>(kv_last_page_len.size()); }
  int group_size() const { return num_qo_heads / num_kv_heads; }
  int total_rows() const { return qo_indptr.empty() ? 0 : qo_indptr.back(); }
  int q_len(int r) const { return qo_indptr[r + 1] - qo_indptr[r]; }
  int num_pages_of(int r) const { return kv_page_indptr[r + 1] - kv_page_indptr[r]; }
  int kv_len(int r) const { return (num_pages_of(r) - 1) * page_size + kv_last_page_len[r]; }
  // Position (= the last visible key position) of query row i of request r.
  int row_position(int r, int i) const { return kv_len(r) - q_len(r) + i; }
  // row_position of every query row, in row order ([total_rows]).
  std::vector<int32_t> row_positions() const {
    std::vector<int32_t> pos(static_cast<size_t>(total_rows()));
    for (int r = 0; r < batch_size(); ++r) {
      for (int i = 0; i < q_len(r); ++i)
        pos[static_cast<size_t>(qo_indptr[r] + i)] = row_position(r, i);
    }
    return pos;
  }
  // Physical page holding token `position` of request r.
  int32_t page_of(int r, int position) const {
    return kv_page_indices[kv_page_indptr[r] + position / page_size];
  }
  // Element counts of the tensors this layout describes.
  size_t q_elements() const { return static_cast<size_t>(total_rows()) * num_qo_heads * head_dim; }
  size_t kv_page_elements() const {  // of k_pages (and of v_pages)
    return static_cast<size_t>(num_pages) * page_size * num_kv_heads * head_dim;
  }
};

// Checks every rule of the data model and returns kInvalidArgument naming the field, the
// offending index and what was expected, e.g.
//   "kv_page_indptr[3] = 17 < kv_page_indptr[2] = 20: offsets must be non-decreasing".
// Rules: head counts > 0 and num_qo_heads % num_kv_heads == 0, group_size <= kMaxGroupSize;
// head_dim in kSupportedHeadDims; page_size in [1, 256]; dtype f32/f16/bf16 (with or without
// kv_fp8); qo_indptr and kv_page_indptr of length batch_size + 1, starting at 0,
// non-decreasing, ending at the length of their arrays; every page index in [0, num_pages);
// kv_last_page_len in [1, page_size]; each request has >= 1 page and q_len >= 1 and
// q_len <= kv_len.
// Never reads out of bounds, whatever the input.
Status validate(const BatchLayout& layout);

// Index of the request owning global query row `row` (binary search on qo_indptr).
int request_of_row(const BatchLayout& layout, int row);

}  // namespace packserve::attention
