// batch_spec_test.cc: the batch spec format (batch_spec.h, docs/batch-spec.md): parsing, one
// test per validation rule (error code + field named), and the builder's invariants (shared
// prefix pages, shuffled page ids, rounded values, poisoned unused slots, reproducibility).
#include "packserve/attention/batch_spec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

namespace packserve::attention {
namespace {

// The example of issue 2, made small enough to build quickly.
constexpr const char* kExample = R"({"num_qo_heads":8,"num_kv_heads":2,"head_dim":64,
  "page_size":16,"dtype":"bf16","seed":7,
  "prefixes":[{"id":"sys","len":64},{"id":"t1","len":32,"parent":"sys"}],
  "requests":[{"q_len":1,"kv_len":110,"prefix":"t1"},{"q_len":30,"kv_len":30},
              {"q_len":5,"kv_len":80,"prefix":"sys"}]})";

void expect_parse_error(const std::string& json, const std::string& needle) {
  const Result<BatchSpec> spec = parse_batch_spec(json);
  ASSERT_FALSE(spec.ok()) << "accepted: " << json;
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find(needle), std::string::npos)
      << "message \"" << spec.status().message() << "\" does not name \"" << needle << "\"";
}

// kExample with one substring replaced (the replaced text must occur).
std::string example_with(const std::string& from, const std::string& to) {
  std::string s = kExample;
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST(BatchSpecParse, ParsesTheIssueExample) {
  const Result<BatchSpec> spec = parse_batch_spec(kExample);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->num_qo_heads, 8);
  EXPECT_EQ(spec->num_kv_heads, 2);
  EXPECT_EQ(spec->head_dim, 64);
  EXPECT_EQ(spec->page_size, 16);
  EXPECT_EQ(spec->dtype, DType::kBF16);
  EXPECT_EQ(spec->seed, 7u);
  ASSERT_EQ(spec->prefixes.size(), 2u);
  EXPECT_EQ(spec->prefixes[1].id, "t1");
  EXPECT_EQ(spec->prefixes[1].len, 32);
  EXPECT_EQ(spec->prefixes[1].parent, "sys");
  EXPECT_EQ(spec->prefixes[0].parent, "");
  ASSERT_EQ(spec->requests.size(), 3u);
  EXPECT_EQ(spec->requests[0].prefix, "t1");
  EXPECT_EQ(spec->requests[1].q_len, 30);
  EXPECT_EQ(spec->requests[1].prefix, "");
}

TEST(BatchSpecParse, RoundTripsThroughToJson) {
  const Result<BatchSpec> spec = parse_batch_spec(kExample);
  ASSERT_TRUE(spec.ok());
  const Result<BatchSpec> again = parse_batch_spec(to_json(*spec));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(to_json(*again), to_json(*spec));
}

TEST(BatchSpecParse, OptionalFieldsDefault) {
  const Result<BatchSpec> spec = parse_batch_spec(
      R"({"num_qo_heads":1,"num_kv_heads":1,"head_dim":64,"page_size":1,"dtype":"f32",
          "requests":[{"q_len":1,"kv_len":1}]})");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->seed, 0u);
  EXPECT_TRUE(spec->prefixes.empty());
}

TEST(BatchSpecParse, RejectsInvalidJson) {
  expect_parse_error("{\"num_qo_heads\":", "invalid JSON");
}

TEST(BatchSpecParse, RejectsNonObject) { expect_parse_error("[1,2]", "expected an object"); }

TEST(BatchSpecParse, RejectsUnknownFields) {
  expect_parse_error(example_with("\"seed\":7", "\"seed\":7,\"sead\":1"), "sead: unknown field");
  expect_parse_error(example_with("\"len\":64", "\"len\":64,\"size\":1"),
                     "prefixes[0].size: unknown field");
  expect_parse_error(example_with("{\"q_len\":30,", "{\"q_len\":30,\"lora\":1,"),
                     "requests[1].lora: unknown field");
}

TEST(BatchSpecParse, RejectsMissingRequiredFields) {
  expect_parse_error(example_with("\"head_dim\":64,", ""), "head_dim: missing required field");
  expect_parse_error(example_with("\"dtype\":\"bf16\",", ""), "dtype: missing required field");
  expect_parse_error(example_with("{\"q_len\":30,", "{"), "requests[1].q_len: missing");
  expect_parse_error(example_with("{\"id\":\"sys\",", "{"), "prefixes[0].id: missing");
  expect_parse_error(R"({"num_qo_heads":1,"num_kv_heads":1,"head_dim":64,"page_size":1,
                        "dtype":"f32"})",
                     "requests: missing required field");
}

TEST(BatchSpecParse, RejectsWrongTypes) {
  expect_parse_error(example_with("\"num_qo_heads\":8", "\"num_qo_heads\":\"8\""),
                     "num_qo_heads: expected an integer, got string");
  expect_parse_error(example_with("\"head_dim\":64", "\"head_dim\":64.0"),
                     "head_dim: expected an integer, got number");
  expect_parse_error(example_with("\"page_size\":16", "\"page_size\":true"),
                     "page_size: expected an integer, got boolean");
  expect_parse_error(example_with("\"dtype\":\"bf16\"", "\"dtype\":16"),
                     "dtype: expected a string");
  expect_parse_error(example_with("\"seed\":7", "\"seed\":-7"), "seed: expected a non-negative");
  expect_parse_error(example_with("\"seed\":7", "\"seed\":7.5"), "seed: expected a non-negative");
  expect_parse_error(example_with("{\"q_len\":30,", "{\"q_len\":[30],"),
                     "requests[1].q_len: expected an integer, got array");
  expect_parse_error(example_with("\"parent\":\"sys\"", "\"parent\":0"),
                     "prefixes[1].parent: expected a string");
  expect_parse_error(example_with("\"prefix\":\"t1\"", "\"prefix\":null"),
                     "requests[0].prefix: expected a string");
  expect_parse_error(example_with("\"num_kv_heads\":2", "\"num_kv_heads\":4294967298"),
                     "num_kv_heads = 4294967298");
}

TEST(BatchSpecParse, RejectsNonArrayLists) {
  const std::string head =
      R"({"num_qo_heads":1,"num_kv_heads":1,"head_dim":64,"page_size":1,"dtype":"f32",)";
  expect_parse_error(head + R"("prefixes":{},"requests":[{"q_len":1,"kv_len":1}]})",
                     "prefixes: expected an array, got object");
  expect_parse_error(head + R"("requests":{"q_len":1,"kv_len":1}})",
                     "requests: expected an array, got object");
  expect_parse_error(head + R"("requests":[[1,1]]})", "requests[0]: expected an object");
}

TEST(BatchSpecParse, RejectsEmptyIds) {
  expect_parse_error(example_with("\"parent\":\"sys\"", "\"parent\":\"\""),
                     "prefixes[1].parent: expected a prefix id");
  expect_parse_error(example_with("\"prefix\":\"t1\"", "\"prefix\":\"\""),
                     "requests[0].prefix: expected a prefix id");
}

TEST(BatchSpecParse, RejectsUnknownDtype) {
  expect_parse_error(example_with("\"bf16\"", "\"fp8\""), "dtype: expected one of");
}

TEST(BatchSpecParse, Fp8KvDtype) {
  const Result<BatchSpec> spec = parse_batch_spec(
      example_with("\"dtype\":\"bf16\"", "\"dtype\":\"bf16\",\"kv_dtype\":\"fp8_e4m3\""));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_TRUE(spec->kv_fp8);
  EXPECT_TRUE(parse_batch_spec(to_json(*spec))->kv_fp8);  // round trip
  const Result<BatchSpec> same = parse_batch_spec(
      example_with("\"dtype\":\"bf16\"", "\"dtype\":\"bf16\",\"kv_dtype\":\"bf16\""));
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(same->kv_fp8);
  expect_parse_error(example_with("\"dtype\":\"bf16\"", "\"dtype\":\"bf16\",\"kv_dtype\":\"f16\""),
                     "kv_dtype: expected \"fp8_e4m3\" or the dtype \"bf16\", got \"f16\"");
  // f32 queries over float8 pages (the CPU backend's float8 KV cache).
  const Result<BatchSpec> f32 = parse_batch_spec(
      example_with("\"dtype\":\"bf16\"", "\"dtype\":\"f32\",\"kv_dtype\":\"fp8_e4m3\""));
  ASSERT_TRUE(f32.ok()) << f32.status().to_string();
  EXPECT_TRUE(f32->kv_fp8);
  EXPECT_EQ(f32->dtype, DType::kF32);
}

TEST(BatchSpecParse, LoadReportsUnreadableFile) {
  const Result<BatchSpec> spec = load_batch_spec("/nonexistent/batch.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kNotFound);
  EXPECT_NE(spec.status().message().find("/nonexistent/batch.json"), std::string::npos);
}

// --- validate_spec: one test per rule, on a programmatic spec.
BatchSpec small_spec() {
  BatchSpec s;
  s.num_qo_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  s.page_size = 4;
  s.dtype = DType::kF32;
  s.seed = 3;
  s.prefixes = {{"a", 8, ""}, {"b", 4, "a"}, {"c", 4, "a"}};
  s.requests = {{1, 20, "b"}, {3, 15, "c"}, {2, 6, ""}, {1, 9, "a"}};
  return s;
}

void expect_invalid(const BatchSpec& spec, const std::string& needle) {
  const Status s = validate_spec(spec);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos)
      << "message \"" << s.message() << "\" does not name \"" << needle << "\"";
  EXPECT_FALSE(build_batch(spec).ok());
}

TEST(BatchSpecValidate, AcceptsSmallSpec) { EXPECT_TRUE(validate_spec(small_spec()).ok()); }

TEST(BatchSpecValidate, RejectsBadShape) {
  BatchSpec s = small_spec();
  s.num_qo_heads = 0;
  expect_invalid(s, "num_qo_heads = 0");
  s = small_spec();
  s.num_qo_heads = 3;
  expect_invalid(s, "not divisible");
  s = small_spec();
  s.head_dim = 80;
  expect_invalid(s, "head_dim = 80");
  s = small_spec();
  s.page_size = 300;
  expect_invalid(s, "page_size = 300");
}

TEST(BatchSpecValidate, RejectsNoRequests) {
  BatchSpec s = small_spec();
  s.requests.clear();
  expect_invalid(s, "requests: expected at least 1 request");
}

TEST(BatchSpecValidate, RejectsZeroQLen) {
  BatchSpec s = small_spec();
  s.requests[2].q_len = 0;
  expect_invalid(s, "requests[2].q_len = 0");
}

TEST(BatchSpecValidate, RejectsKvLenBelowQLen) {
  BatchSpec s = small_spec();
  s.requests[2] = {7, 6, ""};
  expect_invalid(s, "requests[2].kv_len = 6 < q_len = 7");
}

TEST(BatchSpecValidate, RejectsPrefixLenNotMultipleOfPageSize) {
  BatchSpec s = small_spec();
  s.prefixes[1].len = 6;
  expect_invalid(s, "prefixes[1].len = 6: expected a positive multiple of page_size = 4");
  s = small_spec();
  s.prefixes[0].len = 0;
  expect_invalid(s, "prefixes[0].len = 0");
}

TEST(BatchSpecValidate, RejectsDuplicateAndEmptyIds) {
  BatchSpec s = small_spec();
  s.prefixes[2].id = "b";
  expect_invalid(s, "prefixes[2].id = \"b\": duplicate id");
  s = small_spec();
  s.prefixes[0].id = "";
  expect_invalid(s, "prefixes[0].id: expected a non-empty string");
}

TEST(BatchSpecValidate, RejectsUnknownParent) {
  BatchSpec s = small_spec();
  s.prefixes[2].parent = "zz";
  expect_invalid(s, "prefixes[2].parent = \"zz\": no prefix has this id");
}

TEST(BatchSpecValidate, RejectsCycles) {
  BatchSpec s = small_spec();
  s.prefixes[0].parent = "b";  // a -> b -> a
  expect_invalid(s, "cycle");
  s = small_spec();
  s.prefixes[1].parent = "b";  // self
  expect_invalid(s, "prefixes[1].parent: cycle");
}

TEST(BatchSpecValidate, RejectsUnknownRequestPrefix) {
  BatchSpec s = small_spec();
  s.requests[1].prefix = "nope";
  expect_invalid(s, "requests[1].prefix = \"nope\": no prefix has this id");
}

TEST(BatchSpecValidate, RejectsQueryRowsInsideThePrefix) {
  // Chain "a" -> "b" is 12 tokens; kv_len 12 + q_len 1 = 13 is the least allowed.
  BatchSpec s = small_spec();
  s.requests[0] = {1, 13, "b"};
  EXPECT_TRUE(validate_spec(s).ok());
  s.requests[0] = {2, 13, "b"};
  expect_invalid(s, "requests[0].kv_len = 13: kv_len - q_len = 11 < 12");
}

TEST(BatchSpecValidate, RejectsHugeBatch) {
  BatchSpec s = small_spec();
  s.head_dim = 256;
  s.num_qo_heads = 64;
  s.num_kv_heads = 64;
  s.requests = {{1, 2'000'000'000, ""}};
  expect_invalid(s, "expected at most");
}

// --- build_batch
TEST(BatchSpecBuild, SharesPrefixPagesAndShufflesPageIds) {
  const BatchSpec spec = small_spec();
  const Result<BatchData> data = build_batch(spec);
  ASSERT_TRUE(data.ok()) << data.status().to_string();
  const BatchLayout& l = data->layout;
  ASSERT_TRUE(validate(l).ok());
  ASSERT_EQ(l.batch_size(), 4);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(l.q_len(r), spec.requests[r].q_len);
    EXPECT_EQ(l.kv_len(r), spec.requests[r].kv_len);
  }
  // Pages: node a = 2, b = 1, c = 1; own pages ceil((20-12)/4)=2, ceil((15-12)/4)=1,
  // ceil(6/4)=2, ceil((9-8)/4)=1 -> 4 + 6 = 10 physical pages.
  EXPECT_EQ(l.num_pages, 10);
  const auto pages = [&](int r) {
    return std::vector<int32_t>(l.kv_page_indices.begin() + l.kv_page_indptr[r],
                                l.kv_page_indices.begin() + l.kv_page_indptr[r + 1]);
  };
  // Requests 0 (b), 1 (c) and 3 (a) share a's 2 pages; 0 and 1 differ at page 2 (b vs c).
  EXPECT_EQ(pages(0)[0], pages(1)[0]);
  EXPECT_EQ(pages(0)[1], pages(1)[1]);
  EXPECT_EQ(pages(0)[0], pages(3)[0]);
  EXPECT_EQ(pages(0)[1], pages(3)[1]);
  EXPECT_NE(pages(0)[2], pages(1)[2]);
  // Every page outside the shared chains is referenced exactly once.
  std::multiset<int32_t> all(l.kv_page_indices.begin(), l.kv_page_indices.end());
  EXPECT_EQ(std::set<int32_t>(all.begin(), all.end()).size(), 10u);
  EXPECT_EQ(all.count(pages(0)[0]), 3u);
  EXPECT_EQ(all.count(pages(0)[2]), 1u);
  // Not the identity order of allocation.
  bool identity = true;
  for (size_t i = 0; i < l.kv_page_indices.size(); ++i) {
    identity = identity && l.kv_page_indices[i] == static_cast<int32_t>(i);
  }
  EXPECT_FALSE(identity);
  EXPECT_FLOAT_EQ(data->sm_scale, 0.125f);
}

TEST(BatchSpecBuild, ValuesAreRoundedFiniteAndUnusedSlotsPoisoned) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    BatchSpec spec = small_spec();
    spec.dtype = dtype;
    const Result<BatchData> data = build_batch(spec);
    ASSERT_TRUE(data.ok());
    const BatchLayout& l = data->layout;
    ASSERT_EQ(data->q.size(), l.q_elements() * dtype_size_bytes(dtype));
    ASSERT_EQ(data->k_pages.size(), l.kv_page_elements() * dtype_size_bytes(dtype));
    for (size_t i = 0; i < l.q_elements(); ++i) {
      const float x = load_as_float(data->q.data(), i, dtype);
      ASSERT_TRUE(std::isfinite(x));
      ASSERT_EQ(round_to_dtype(x, dtype), x);
    }
    // A token slot is valid iff some request holds it below its kv_len.
    const size_t token_elems = static_cast<size_t>(l.num_kv_heads) * l.head_dim;
    std::vector<char> valid(static_cast<size_t>(l.num_pages) * l.page_size, 0);
    for (int r = 0; r < l.batch_size(); ++r) {
      for (int p = 0; p < l.kv_len(r); ++p) {
        valid[static_cast<size_t>(l.page_of(r, p)) * l.page_size + p % l.page_size] = 1;
      }
    }
    int poisoned = 0;
    for (size_t slot = 0; slot < valid.size(); ++slot) {
      for (size_t e = 0; e < token_elems; ++e) {
        const float k = load_as_float(data->k_pages.data(), slot * token_elems + e, dtype);
        const float v = load_as_float(data->v_pages.data(), slot * token_elems + e, dtype);
        if (valid[slot]) {
          ASSERT_TRUE(std::isfinite(k) && std::isfinite(v)) << "slot " << slot;
        } else {
          ASSERT_TRUE(std::isnan(k) && std::isnan(v)) << "slot " << slot;
          ++poisoned;
        }
      }
    }
    // Unused slots: request 0 has 8 own tokens (0 unused), 1: 3 of 4 -> 1, 2: 6 -> 2,
    // 3: 1 -> 3; 6 slots x 2 kv heads x 64 dims.
    EXPECT_EQ(poisoned, 6 * 2 * 64);
  }
}

TEST(BatchSpecBuild, SameSpecSameBytesOtherSeedOtherBytes) {
  const BatchSpec spec = small_spec();
  const Result<BatchData> a = build_batch(spec);
  const Result<BatchData> b = build_batch(spec);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->q, b->q);
  EXPECT_EQ(a->k_pages, b->k_pages);
  EXPECT_EQ(a->layout.kv_page_indices, b->layout.kv_page_indices);
  BatchSpec other = spec;
  other.seed = 4;
  const Result<BatchData> c = build_batch(other);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->q, c->q);
  EXPECT_NE(a->v_pages, c->v_pages);
}

TEST(BatchSpecBuild, Fp8KvPagesAreE4m3Bytes) {
  BatchSpec spec = small_spec();
  spec.dtype = DType::kBF16;
  spec.kv_fp8 = true;
  const Result<BatchData> data = build_batch(spec);
  ASSERT_TRUE(data.ok()) << data.status().to_string();
  ASSERT_EQ(data->k_pages.size(), data->layout.kv_page_elements());
  ASSERT_EQ(data->q.size(), data->layout.q_elements() * 2);
  int nonzero = 0;
  for (std::byte b : data->k_pages) nonzero += b != std::byte{0};
  EXPECT_GT(nonzero, static_cast<int>(data->k_pages.size()) / 2);
  // The same draws as an f32 batch (its values are the draws), rounded to e4m3.
  spec.kv_fp8 = false;
  spec.dtype = DType::kF32;
  const Result<BatchData> wide = build_batch(spec, BuildOptions{false});
  ASSERT_TRUE(wide.ok());
  const Result<BatchData> narrow = build_batch(
      [&] {
        BatchSpec s = spec;
        s.dtype = DType::kBF16;
        s.kv_fp8 = true;
        return s;
      }(),
      BuildOptions{false});
  for (size_t i = 0; i < narrow->layout.kv_page_elements(); ++i) {
    const float v = load_as_float(wide->v_pages.data(), i, wide->layout.dtype);
    ASSERT_EQ(load_as_float(narrow->v_pages.data(), i, DType::kFP8E4M3),
              round_to_dtype(v, DType::kFP8E4M3))
        << i;
  }
}

TEST(BatchSpecBuild, NoPoisonOption) {
  BuildOptions options;
  options.poison_unused_slots = false;
  const Result<BatchData> data = build_batch(small_spec(), options);
  ASSERT_TRUE(data.ok());
  for (size_t i = 0; i < data->layout.kv_page_elements(); ++i) {
    ASSERT_TRUE(std::isfinite(load_as_float(data->k_pages.data(), i, DType::kF32)));
  }
}

}  // namespace
}  // namespace packserve::attention
