// batch_spec.h: the batch spec (issue 2, docs/batch-spec.md): a small JSON description of
// one attention batch (shape, dtype, seed, a forest of shared prefixes, requests), and the
// builder that turns it into a BatchLayout plus random Q/K/V.
//
//   {"num_qo_heads":32,"num_kv_heads":8,"head_dim":128,"page_size":16,"dtype":"bf16","seed":7,
//    "prefixes":[{"id":"sys","len":2048},{"id":"t1","len":512,"parent":"sys"}],
//    "requests":[{"q_len":1,"kv_len":2816,"prefix":"t1"},{"q_len":300,"kv_len":300}]}
//
// A prefix node's `len` counts its own tokens (a multiple of page_size); a request's `prefix`
// names its deepest node, whose chain of ancestors (root first) is the physically shared
// start of its context. kv_len counts the whole context, so the request's own tokens are
// kv_len - chain length >= q_len: the query rows are the last q_len of the request's own
// tokens (chunked prefill when q_len is smaller).
//
// Builder invariants (build_batch): each prefix node used by a request gets its pages
// allocated once and every request under it references the same physical pages; each
// request's own pages follow its chain; physical page ids are a seeded shuffle (never the
// identity when there are >= 2 pages); every value is drawn from the seed and rounded to the
// dtype. Same spec => same bytes, on every platform (common/rng.h).
// Thread-safety: pure functions over values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/attention/batch_layout.h"
#include "packserve/attention/tensors.h"
#include "packserve/common/dtype.h"
#include "packserve/common/status.h"

namespace packserve::attention {

struct PrefixSpec {
  std::string id;      // unique, non-empty
  int len = 0;         // tokens of this node alone, a multiple of page_size, >= page_size
  std::string parent;  // id of the parent node; empty = a root
};

struct RequestSpec {
  int q_len = 1;       // query rows, >= 1
  int kv_len = 1;      // whole context including the prefix chain, >= q_len + chain length
  std::string prefix;  // deepest shared prefix node; empty = none
};

struct BatchSpec {
  int num_qo_heads = 1;
  int num_kv_heads = 1;
  int head_dim = 64;
  int page_size = 16;
  DType dtype = DType::kBF16;
  bool kv_fp8 = false;  // "kv_dtype": "fp8_e4m3": K and V pages of e4m3 bytes (BatchLayout)
  uint64_t seed = 0;
  std::vector<PrefixSpec> prefixes;
  std::vector<RequestSpec> requests;  // >= 1
};

// Upper bound on the elements of each built tensor (q, k_pages, v_pages), so a typo in a spec
// is an error instead of an out-of-memory abort.
inline constexpr int64_t kMaxSpecTensorElements = int64_t{1} << 28;

// Every rule of docs/batch-spec.md; kInvalidArgument naming the field, e.g.
//   "requests[2].kv_len = 100: kv_len - q_len = 99 < 2560, the length of prefix chain "t1""
Status validate_spec(const BatchSpec& spec);

// Parses and validates JSON text. Unknown fields and wrong types are rejected
// ("requests[0].q_len: expected an integer, got string"); nothing is defaulted silently
// except the documented optional fields (seed = 0, prefixes = [], parent/prefix = none).
Result<BatchSpec> parse_batch_spec(std::string_view json_text);
// Reads a file and parses it; kNotFound when it cannot be read.
Result<BatchSpec> load_batch_spec(const std::string& path);
// The spec as compact JSON (parse_batch_spec(to_json(s)) reproduces s); for failing tests.
std::string to_json(const BatchSpec& spec);

// One built batch: the layout and its tensors, owning the bytes.
struct BatchData {
  BatchLayout layout;
  std::vector<std::byte> q;        // [total_rows, num_qo_heads, head_dim] of layout.dtype
  std::vector<std::byte> k_pages;  // [num_pages, page_size, num_kv_heads, head_dim]
  std::vector<std::byte> v_pages;  // same shape as k_pages
  float sm_scale = 0.0f;           // 1 / sqrt(head_dim)
  AttentionTensors tensors() const { return {q, k_pages, v_pages, sm_scale}; }
};

struct BuildOptions {
  // Fill the unused token slots of each request's last page with NaN, so an executor that
  // reads past kv_len produces NaN instead of a plausible number.
  bool poison_unused_slots = true;
};

// Validates the spec and builds the batch (see the builder invariants above). Q, K and V are
// N(0, 1) draws rounded to the dtype (K and V to e4m3 with kv_fp8); sm_scale = 1 / sqrt(head_dim).
Result<BatchData> build_batch(const BatchSpec& spec, const BuildOptions& options = {});

}  // namespace packserve::attention
