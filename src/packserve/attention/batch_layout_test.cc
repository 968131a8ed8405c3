// batch_layout_test.cc: one test per rule of validate() (batch_layout.h): the error code, the
// field (and index) named in the message, and the layout left unchanged; plus
// request_of_row() and the row positions.
#include "packserve/attention/batch_layout.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace packserve::attention {
namespace {

// Two requests, page_size 4, 6 pages:
//   request 0: pages {5, 2}, last page 3 tokens -> kv_len 7, q_len 2 (positions 5, 6)
//   request 1: pages {5, 0, 1, 3}, last page 1 token -> kv_len 13, q_len 1 (position 12)
BatchLayout good_layout() {
  BatchLayout l;
  l.num_qo_heads = 8;
  l.num_kv_heads = 2;
  l.head_dim = 128;
  l.page_size = 4;
  l.num_pages = 6;
  l.dtype = DType::kBF16;
  l.qo_indptr = {0, 2, 3};
  l.kv_page_indptr = {0, 2, 6};
  l.kv_page_indices = {5, 2, 5, 0, 1, 3};
  l.kv_last_page_len = {3, 1};
  return l;
}

bool same(const BatchLayout& a, const BatchLayout& b) {
  return a.num_qo_heads == b.num_qo_heads && a.num_kv_heads == b.num_kv_heads &&
         a.head_dim == b.head_dim && a.page_size == b.page_size && a.num_pages == b.num_pages &&
         a.dtype == b.dtype && a.qo_indptr == b.qo_indptr && a.kv_page_indptr == b.kv_page_indptr &&
         a.kv_page_indices == b.kv_page_indices && a.kv_last_page_len == b.kv_last_page_len;
}

// Validates a layout expected to break one rule: kInvalidArgument, `needle` in the message,
// and the layout unchanged.
void expect_rejected(const BatchLayout& layout, const std::string& needle) {
  const BatchLayout before = layout;
  const Status s = validate(layout);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos)
      << "message \"" << s.message() << "\" does not name \"" << needle << "\"";
  EXPECT_TRUE(same(layout, before));
}

TEST(BatchLayoutValidate, AcceptsGoodLayout) {
  const BatchLayout l = good_layout();
  EXPECT_TRUE(validate(l).ok()) << validate(l).to_string();
  EXPECT_EQ(l.kv_len(0), 7);
  EXPECT_EQ(l.kv_len(1), 13);
  EXPECT_EQ(l.row_position(0, 0), 5);
  EXPECT_EQ(l.row_position(1, 0), 12);
  EXPECT_EQ(l.row_positions(), (std::vector<int32_t>{5, 6, 12}));
}

TEST(BatchLayoutValidate, AcceptsEveryDtypeHeadDimAndPageSizeBound) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int head_dim : {64, 128, 256}) {
      BatchLayout l = good_layout();
      l.dtype = dtype;
      l.head_dim = head_dim;
      EXPECT_TRUE(validate(l).ok());
    }
  }
  BatchLayout one = good_layout();  // page_size 1: every page holds one token
  one.page_size = 1;
  one.kv_last_page_len = {1, 1};
  EXPECT_TRUE(validate(one).ok()) << validate(one).to_string();
  BatchLayout big = good_layout();
  big.page_size = 256;
  EXPECT_TRUE(validate(big).ok());
}

TEST(BatchLayoutValidate, AcceptsEmptyBatch) {
  BatchLayout l = good_layout();
  l.qo_indptr = {0};
  l.kv_page_indptr = {0};
  l.kv_page_indices.clear();
  l.kv_last_page_len.clear();
  EXPECT_TRUE(validate(l).ok());
}

TEST(BatchLayoutValidate, RejectsNonPositiveHeadCounts) {
  BatchLayout l = good_layout();
  l.num_qo_heads = 0;
  expect_rejected(l, "num_qo_heads = 0");
  l = good_layout();
  l.num_kv_heads = -1;
  expect_rejected(l, "num_kv_heads = -1");
}

TEST(BatchLayoutValidate, RejectsHeadsNotDivisible) {
  BatchLayout l = good_layout();
  l.num_qo_heads = 6;
  l.num_kv_heads = 4;
  expect_rejected(l, "num_qo_heads = 6 is not divisible by num_kv_heads = 4");
}

TEST(BatchLayoutValidate, RejectsGroupLargerThanTheLargestQueryTile) {
  BatchLayout l = good_layout();
  l.num_qo_heads = 2 * kMaxGroupSize;
  l.num_kv_heads = 1;
  expect_rejected(l, "group_size");
}

TEST(BatchLayoutValidate, RejectsUnsupportedHeadDim) {
  for (int head_dim : {0, 32, 96, 512}) {
    BatchLayout l = good_layout();
    l.head_dim = head_dim;
    expect_rejected(l, "head_dim = " + std::to_string(head_dim));
  }
}

TEST(BatchLayoutValidate, RejectsPageSizeOutsideRange) {
  for (int page_size : {0, -4, 257}) {
    BatchLayout l = good_layout();
    l.page_size = page_size;
    expect_rejected(l, "page_size = " + std::to_string(page_size));
  }
}

TEST(BatchLayoutValidate, RejectsUnknownDtype) {
  BatchLayout l = good_layout();
  l.dtype = static_cast<DType>(9);
  expect_rejected(l, "dtype");
}

// Any query dtype takes float8 K/V pages: f16 / bf16 (the CUDA backend), f32 (the CPU one).
TEST(BatchLayoutValidate, Fp8KvWithEveryDtype) {
  BatchLayout l = good_layout();
  l.kv_fp8 = true;
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    l.dtype = d;
    EXPECT_TRUE(validate(l).ok()) << dtype_name(d);
    EXPECT_EQ(l.kv_dtype(), DType::kFP8E4M3);
  }
}

TEST(BatchLayoutValidate, RejectsNegativeNumPages) {
  BatchLayout l = good_layout();
  l.num_pages = -1;
  expect_rejected(l, "num_pages = -1");
}

TEST(BatchLayoutValidate, RejectsIndptrOfWrongLength) {
  BatchLayout l = good_layout();
  l.qo_indptr = {0, 2};
  expect_rejected(l, "qo_indptr: length 2, expected batch_size + 1 = 3");
  l = good_layout();
  l.kv_page_indptr = {0, 2, 6, 6};
  expect_rejected(l, "kv_page_indptr: length 4, expected batch_size + 1 = 3");
  l = good_layout();
  l.qo_indptr.clear();  // never indexed when empty
  expect_rejected(l, "qo_indptr: length 0");
}

TEST(BatchLayoutValidate, RejectsIndptrNotStartingAtZero) {
  BatchLayout l = good_layout();
  l.qo_indptr = {1, 2, 3};
  expect_rejected(l, "qo_indptr[0] = 1: expected 0");
  l = good_layout();
  l.kv_page_indptr = {1, 2, 6};
  expect_rejected(l, "kv_page_indptr[0] = 1: expected 0");
}

TEST(BatchLayoutValidate, RejectsDecreasingIndptr) {
  BatchLayout l = good_layout();
  l.qo_indptr = {0, 3, 2};
  expect_rejected(l, "qo_indptr[2] = 2 < qo_indptr[1] = 3: offsets must be non-decreasing");
  l = good_layout();
  l.kv_page_indptr = {0, 7, 6};
  l.kv_page_indices.push_back(4);
  expect_rejected(l, "kv_page_indptr[2] = 6 < kv_page_indptr[1] = 7");
}

TEST(BatchLayoutValidate, RejectsPageIndptrNotEndingAtIndicesLength) {
  BatchLayout l = good_layout();
  l.kv_page_indices.push_back(4);  // 7 indices, indptr ends at 6
  expect_rejected(l, "kv_page_indptr[2] = 6: expected kv_page_indices.size() = 7");
}

TEST(BatchLayoutValidate, RejectsPageIndexOutOfRange) {
  BatchLayout l = good_layout();
  l.kv_page_indices[3] = 6;  // == num_pages
  expect_rejected(l, "kv_page_indices[3] = 6: expected a page index in [0, num_pages = 6)");
  l = good_layout();
  l.kv_page_indices[0] = -1;
  expect_rejected(l, "kv_page_indices[0] = -1");
}

TEST(BatchLayoutValidate, RejectsLastPageLenOutsideOneToPageSize) {
  BatchLayout l = good_layout();
  l.kv_last_page_len[1] = 0;
  expect_rejected(l, "kv_last_page_len[1] = 0: expected in [1, page_size = 4]");
  l = good_layout();
  l.kv_last_page_len[0] = 5;
  expect_rejected(l, "kv_last_page_len[0] = 5");
}

TEST(BatchLayoutValidate, RejectsRequestWithoutPages) {
  BatchLayout l = good_layout();
  l.kv_page_indptr = {0, 0, 6};
  l.qo_indptr = {0, 0, 1};  // would also be q_len 0; the page rule is checked first
  expect_rejected(l, "request 0 has no KV page");
}

TEST(BatchLayoutValidate, RejectsZeroQLen) {
  BatchLayout l = good_layout();
  l.qo_indptr = {0, 2, 2};
  expect_rejected(l, "q_len of request 1 is 0");
}

TEST(BatchLayoutValidate, RejectsQLenLargerThanKvLen) {
  BatchLayout l = good_layout();
  l.qo_indptr = {0, 8, 9};  // request 0: q_len 8 > kv_len 7
  expect_rejected(l, "q_len of request 0 = 8 > kv_len = 7");
}

TEST(BatchLayoutValidate, RejectsKvLenBeyondInt32) {
  // 2^31 / 256 + 1 pages of 256 tokens: kv_len overflows int32; computed in int64.
  BatchLayout l = good_layout();
  l.page_size = 256;
  const int32_t pages = (1 << 23) + 1;
  l.num_pages = 1;
  l.qo_indptr = {0, 1};
  l.kv_page_indptr = {0, pages};
  l.kv_page_indices.assign(pages, 0);
  l.kv_last_page_len = {256};
  expect_rejected(l, "kv_len of request 0");
}

TEST(BatchLayoutRequestOfRow, MapsEveryRowToItsRequest) {
  BatchLayout l = good_layout();
  l.qo_indptr = {0, 2, 3};
  EXPECT_EQ(request_of_row(l, 0), 0);
  EXPECT_EQ(request_of_row(l, 1), 0);
  EXPECT_EQ(request_of_row(l, 2), 1);
  // Against a linear scan, on a batch of varied q_lens.
  BatchLayout m;
  m.qo_indptr = {0};
  const int q_lens[] = {1, 5, 1, 1, 7, 2};
  for (int q : q_lens) m.qo_indptr.push_back(m.qo_indptr.back() + q);
  for (int row = 0; row < m.qo_indptr.back(); ++row) {
    int expected = 0;
    while (m.qo_indptr[expected + 1] <= row) ++expected;
    EXPECT_EQ(request_of_row(m, row), expected) << "row " << row;
  }
}

}  // namespace
}  // namespace packserve::attention
