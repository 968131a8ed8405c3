// batch_layout.cc: validate() and request_of_row() of batch_layout.h.
//
// validate() checks sizes before it indexes anything, and computes lengths in int64, so no
// input (however malformed) leads to an out-of-bounds read or a signed overflow.
#include "packserve/attention/batch_layout.h"

#include <algorithm>
#include <cstdint>
#include <string>

namespace packserve::attention {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// CSR offsets: length batch_size + 1, first 0, non-decreasing, last == `end` (named).
Status check_indptr(const std::vector<int32_t>& indptr, const char* name, int batch_size,
                    int64_t end, const char* end_name) {
  const int64_t expected_len = static_cast<int64_t>(batch_size) + 1;
  if (static_cast<int64_t>(indptr.size()) != expected_len) {
    return invalid_argument(std::string(name) + ": length " +
                            str(static_cast<int64_t>(indptr.size())) +
                            ", expected batch_size + 1 = " + str(expected_len) +
                            " (batch_size = kv_last_page_len.size())");
  }
  if (indptr[0] != 0) {
    return invalid_argument(std::string(name) + "[0] = " + str(indptr[0]) + ": expected 0");
  }
  for (size_t i = 1; i < indptr.size(); ++i) {
    if (indptr[i] < indptr[i - 1]) {
      return invalid_argument(std::string(name) + "[" + str(static_cast<int64_t>(i)) +
                              "] = " + str(indptr[i]) + " < " + name + "[" +
                              str(static_cast<int64_t>(i - 1)) + "] = " + str(indptr[i - 1]) +
                              ": offsets must be non-decreasing");
    }
  }
  if (end >= 0 && indptr.back() != end) {
    return invalid_argument(std::string(name) + "[" + str(batch_size) + "] = " +
                            str(indptr.back()) + ": expected " + end_name + " = " + str(end));
  }
  return ok_status();
}

}  // namespace

Status validate(const BatchLayout& layout) {
  if (layout.num_qo_heads < 1) {
    return invalid_argument("num_qo_heads = " + str(layout.num_qo_heads) + ": expected >= 1");
  }
  if (layout.num_kv_heads < 1) {
    return invalid_argument("num_kv_heads = " + str(layout.num_kv_heads) + ": expected >= 1");
  }
  if (layout.num_qo_heads % layout.num_kv_heads != 0) {
    return invalid_argument("num_qo_heads = " + str(layout.num_qo_heads) +
                            " is not divisible by num_kv_heads = " + str(layout.num_kv_heads));
  }
  if (layout.group_size() > kMaxGroupSize) {
    return invalid_argument("group_size = num_qo_heads / num_kv_heads = " +
                            str(layout.group_size()) + ": expected <= " + str(kMaxGroupSize));
  }
  if (std::find(std::begin(kSupportedHeadDims), std::end(kSupportedHeadDims), layout.head_dim) ==
      std::end(kSupportedHeadDims)) {
    return invalid_argument("head_dim = " + str(layout.head_dim) +
                            ": expected one of 64, 128, 256");
  }
  if (layout.page_size < kMinPageSize || layout.page_size > kMaxPageSize) {
    return invalid_argument("page_size = " + str(layout.page_size) + ": expected in [" +
                            str(kMinPageSize) + ", " + str(kMaxPageSize) + "]");
  }
  if (layout.dtype != DType::kF32 && layout.dtype != DType::kF16 && layout.dtype != DType::kBF16) {
    return invalid_argument("dtype = " + str(static_cast<int64_t>(layout.dtype)) +
                            ": expected f32, f16 or bf16");
  }
  if (layout.num_pages < 0) {
    return invalid_argument("num_pages = " + str(layout.num_pages) + ": expected >= 0");
  }
  const int batch_size = layout.batch_size();
  PS_RETURN_IF_ERROR(check_indptr(layout.qo_indptr, "qo_indptr", batch_size, -1, ""));
  PS_RETURN_IF_ERROR(check_indptr(layout.kv_page_indptr, "kv_page_indptr", batch_size,
                                  static_cast<int64_t>(layout.kv_page_indices.size()),
                                  "kv_page_indices.size()"));
  for (size_t i = 0; i < layout.kv_page_indices.size(); ++i) {
    const int32_t page = layout.kv_page_indices[i];
    if (page < 0 || page >= layout.num_pages) {
      return invalid_argument(
          "kv_page_indices[" + str(static_cast<int64_t>(i)) + "] = " + str(page) +
          ": expected a page index in [0, num_pages = " + str(layout.num_pages) + ")");
    }
  }
  for (int r = 0; r < batch_size; ++r) {
    const int32_t last = layout.kv_last_page_len[r];
    if (last < 1 || last > layout.page_size) {
      return invalid_argument("kv_last_page_len[" + str(r) + "] = " + str(last) +
                              ": expected in [1, page_size = " + str(layout.page_size) + "]");
    }
  }
  for (int r = 0; r < batch_size; ++r) {
    const int64_t num_pages_of =
        static_cast<int64_t>(layout.kv_page_indptr[r + 1]) - layout.kv_page_indptr[r];
    if (num_pages_of < 1) {
      return invalid_argument("kv_page_indptr[" + str(r + 1) + "] - kv_page_indptr[" + str(r) +
                              "] = 0: request " + str(r) + " has no KV page, expected >= 1");
    }
    const int64_t q_len = static_cast<int64_t>(layout.qo_indptr[r + 1]) - layout.qo_indptr[r];
    if (q_len < 1) {
      return invalid_argument("qo_indptr[" + str(r + 1) + "] - qo_indptr[" + str(r) +
                              "] = 0: q_len of request " + str(r) + " is 0, expected >= 1");
    }
    const int64_t kv_len = (num_pages_of - 1) * layout.page_size + layout.kv_last_page_len[r];
    if (kv_len > INT32_MAX) {
      return invalid_argument("kv_len of request " + str(r) + " = " + str(kv_len) +
                              ": expected <= 2^31 - 1");
    }
    if (q_len > kv_len) {
      return invalid_argument("q_len of request " + str(r) + " = " + str(q_len) +
                              " > kv_len = " + str(kv_len) +
                              " (from kv_page_indptr and kv_last_page_len): expected q_len <= "
                              "kv_len");
    }
  }
  return ok_status();
}

int request_of_row(const BatchLayout& layout, int row) {
  // The request r with qo_indptr[r] <= row < qo_indptr[r + 1]: the last offset <= row.
  const auto it = std::upper_bound(layout.qo_indptr.begin(), layout.qo_indptr.end(), row);
  return static_cast<int>(it - layout.qo_indptr.begin()) - 1;
}

}  // namespace packserve::attention
