// random_batch.cc: seeded random batch specs and batch composition (random_batch.h).
#include "testing/random_batch.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "packserve/common/rng.h"

namespace packserve::testing {
namespace {

using attention::BatchData;
using attention::BatchLayout;
using attention::BatchSpec;
using attention::PrefixSpec;
using attention::RequestSpec;

template <typename T, size_t N>
T pick(Rng& rng, const T (&values)[N]) {
  return values[rng.uniform_int(0, static_cast<int64_t>(N) - 1)];
}

bool chance(Rng& rng, double p) { return rng.uniform() < p; }

// Lognormal token count, at least lo, at most hi.
int draw_tokens(Rng& rng, double median, double sigma, int lo, int hi) {
  const double x = rng.lognormal(median, sigma);
  return static_cast<int>(std::clamp(std::lround(x), static_cast<long>(lo), static_cast<long>(hi)));
}

int64_t request_work(const BatchSpec& spec, const RequestSpec& r) {
  return static_cast<int64_t>(r.q_len) * r.kv_len * spec.num_qo_heads * spec.head_dim;
}

}  // namespace

int64_t batch_work(const BatchSpec& spec) {
  int64_t work = 0;
  for (const RequestSpec& r : spec.requests) work += request_work(spec, r);
  return work;
}

BatchSpec random_batch_spec(uint64_t seed, const RandomBatchOptions& options) {
  Rng rng(seed);
  BatchSpec spec;
  spec.seed = rng.next_u64();
  spec.head_dim = pick(rng, {64, 128, 256});
  spec.num_kv_heads = static_cast<int>(rng.uniform_int(1, 2));
  spec.num_qo_heads = spec.num_kv_heads * pick(rng, {1, 4, 8});
  spec.page_size = chance(rng, 0.85) ? pick(rng, {1, 16, 64}) : pick(rng, {2, 3, 128, 256});
  if (options.dtypes.empty()) {
    spec.dtype = pick(rng, {DType::kF32, DType::kF16, DType::kBF16});
  } else {
    spec.dtype =
        options.dtypes[rng.uniform_int(0, static_cast<int64_t>(options.dtypes.size()) - 1)];
  }
  if (options.kv_fp8) {
    spec.kv_fp8 = true;
    if (spec.dtype == DType::kF32) spec.dtype = DType::kBF16;
  }
  if (options.num_qo_heads > 0 && options.num_kv_heads > 0) {
    spec.num_qo_heads = options.num_qo_heads;
    spec.num_kv_heads = options.num_kv_heads;
  }
  if (options.head_dim > 0) spec.head_dim = options.head_dim;
  if (options.page_size > 0) spec.page_size = options.page_size;
  const int ps = spec.page_size;
  const int64_t per_token_work = static_cast<int64_t>(spec.num_qo_heads) * spec.head_dim;
  // Q·K work budget in (q_len * kv_len) units.
  const int64_t budget = std::max<int64_t>(1, options.max_work / per_token_work);

  // Prefix forest: 1-2 roots, depth 1-3, node lengths lognormal in pages (some exactly 1 page).
  std::vector<int64_t> chain_len;  // per node: its chain's length in tokens
  if (options.allow_prefixes && chance(rng, 0.6)) {
    const int num_roots = static_cast<int>(rng.uniform_int(1, 2));
    const int max_depth = static_cast<int>(rng.uniform_int(1, 3));
    const int max_node_pages = std::max(1, 160 / ps);
    const auto add_node = [&](int parent) {
      PrefixSpec node;
      node.id = "p" + std::to_string(spec.prefixes.size());
      const int pages = chance(rng, 0.25)
                            ? 1
                            : draw_tokens(rng, std::max(1.0, 48.0 / ps), 0.8, 1, max_node_pages);
      node.len = pages * ps;
      int64_t len = node.len;
      if (parent >= 0) {
        node.parent = spec.prefixes[parent].id;
        len += chain_len[parent];
      }
      spec.prefixes.push_back(node);
      chain_len.push_back(len);
      return static_cast<int>(spec.prefixes.size()) - 1;
    };
    for (int root = 0; root < num_roots; ++root) {
      std::vector<int> level = {add_node(-1)};
      for (int depth = 2; depth <= max_depth; ++depth) {
        std::vector<int> next;
        for (int parent : level) {
          const int children = static_cast<int>(rng.uniform_int(1, 2));
          for (int c = 0; c < children; ++c) next.push_back(add_node(parent));
        }
        level = next;
      }
    }
  }

  const int num_requests = static_cast<int>(rng.uniform_int(1, options.max_requests));
  const bool one_long = num_requests >= 4 && chance(rng, 0.25);
  int64_t used = 0;
  for (int i = 0; i < num_requests; ++i) {
    RequestSpec r;
    int64_t prefix_len = 0;
    if (!spec.prefixes.empty() && chance(rng, 0.7)) {
      const int node =
          static_cast<int>(rng.uniform_int(0, static_cast<int64_t>(spec.prefixes.size()) - 1));
      r.prefix = spec.prefixes[node].id;
      prefix_len = chain_len[node];
    }
    const double kind = rng.uniform();
    int own = 0;  // the request's own tokens after its prefix, >= q_len
    if (one_long && i == 0) {
      r.q_len = 1;  // the straggler: a long decode request among short ones
      own = static_cast<int>(std::min<int64_t>(budget / 2, 6000));
    } else if (kind < 0.45) {  // decode
      r.q_len = 1;
      own = draw_tokens(rng, 60, 1.2, 1, 3000);
    } else if (kind < 0.70) {  // full prefill
      own = draw_tokens(rng, 24, 1.0, 1, 400);
      r.q_len = own;
    } else {  // chunked prefill: earlier chunks already in the cache
      own = draw_tokens(rng, 48, 1.0, 2, 600);
      r.q_len = static_cast<int>(rng.uniform_int(1, own - 1));
    }
    const double edge = rng.uniform();
    if (edge < 0.15 && r.prefix.empty()) {  // kv_len = page_size - 1, page_size, page_size + 1
      own = std::max(1, ps + static_cast<int>(rng.uniform_int(-1, 1)));
      r.q_len = std::min(r.q_len, own);
    } else if (edge < 0.25 && !r.prefix.empty()) {  // everything before the rows is shared
      own = r.q_len;
    }
    r.kv_len = static_cast<int>(prefix_len) + std::max(own, r.q_len);
    // Keep within budget: shrink a prefill to fewer rows, then drop the request.
    while (used + static_cast<int64_t>(r.q_len) * r.kv_len > budget && r.q_len > 1) {
      r.q_len = std::max(1, r.q_len / 2);
    }
    if (used + static_cast<int64_t>(r.q_len) * r.kv_len > budget && !spec.requests.empty()) {
      continue;
    }
    used += static_cast<int64_t>(r.q_len) * r.kv_len;
    spec.requests.push_back(r);
  }
  if (one_long && spec.requests.size() > 1) {  // move the straggler to a random place
    const auto at = rng.uniform_int(0, static_cast<int64_t>(spec.requests.size()) - 1);
    std::swap(spec.requests[0], spec.requests[at]);
  }
  return spec;
}

Result<BatchData> insert_batch(const BatchData& others, const BatchData& inserted, int at) {
  const BatchLayout& a = others.layout;
  const BatchLayout& b = inserted.layout;
  if (a.num_qo_heads != b.num_qo_heads || a.num_kv_heads != b.num_kv_heads ||
      a.head_dim != b.head_dim || a.page_size != b.page_size || a.dtype != b.dtype ||
      a.kv_fp8 != b.kv_fp8 || others.sm_scale != inserted.sm_scale) {
    return invalid_argument("insert_batch: shapes, dtypes or sm_scale differ");
  }
  if (at < 0 || at > a.batch_size()) {
    return invalid_argument("insert_batch: at = " + std::to_string(at) + " outside [0, " +
                            std::to_string(a.batch_size()) + "]");
  }
  const size_t row_bytes =
      static_cast<size_t>(a.num_qo_heads) * a.head_dim * dtype_size_bytes(a.dtype);
  BatchData c;
  c.layout = a;
  c.sm_scale = others.sm_scale;
  BatchLayout& l = c.layout;
  l.num_pages = a.num_pages + b.num_pages;
  l.qo_indptr = {0};
  l.kv_page_indptr = {0};
  l.kv_page_indices.clear();
  l.kv_last_page_len.clear();
  const auto append = [&](const BatchData& from, int r, int page_offset) {
    const BatchLayout& f = from.layout;
    for (int32_t p = f.kv_page_indptr[r]; p < f.kv_page_indptr[r + 1]; ++p) {
      l.kv_page_indices.push_back(f.kv_page_indices[p] + page_offset);
    }
    l.kv_page_indptr.push_back(static_cast<int32_t>(l.kv_page_indices.size()));
    l.kv_last_page_len.push_back(f.kv_last_page_len[r]);
    l.qo_indptr.push_back(l.qo_indptr.back() + f.q_len(r));
    const auto* q = from.q.data() + f.qo_indptr[r] * row_bytes;
    c.q.insert(c.q.end(), q, q + f.q_len(r) * row_bytes);
  };
  for (int r = 0; r < at; ++r) append(others, r, b.num_pages);
  for (int r = 0; r < b.batch_size(); ++r) append(inserted, r, 0);
  for (int r = at; r < a.batch_size(); ++r) append(others, r, b.num_pages);
  c.k_pages = inserted.k_pages;
  c.k_pages.insert(c.k_pages.end(), others.k_pages.begin(), others.k_pages.end());
  c.v_pages = inserted.v_pages;
  c.v_pages.insert(c.v_pages.end(), others.v_pages.begin(), others.v_pages.end());
  PS_RETURN_IF_ERROR(attention::validate(l));
  return c;
}

BatchData with_sharers(const BatchData& batch) {
  BatchData out = batch;
  BatchLayout& l = out.layout;
  const BatchLayout& b = batch.layout;
  const size_t row_bytes =
      static_cast<size_t>(b.num_qo_heads) * b.head_dim * dtype_size_bytes(b.dtype);
  for (int r = 0; r < b.batch_size(); ++r) {
    const int q_len = b.q_len(r) > 1 ? 1 : std::min(b.kv_len(r), 40);
    l.kv_page_indices.insert(l.kv_page_indices.end(),
                             b.kv_page_indices.begin() + b.kv_page_indptr[r],
                             b.kv_page_indices.begin() + b.kv_page_indptr[r + 1]);
    l.kv_page_indptr.push_back(static_cast<int32_t>(l.kv_page_indices.size()));
    l.kv_last_page_len.push_back(b.kv_last_page_len[r]);
    l.qo_indptr.push_back(l.qo_indptr.back() + q_len);
    for (int k = 0; k < q_len; ++k) {
      const auto* q = batch.q.data() + (b.qo_indptr[r] + k % b.q_len(r)) * row_bytes;
      out.q.insert(out.q.end(), q, q + row_bytes);
    }
  }
  return out;
}

}  // namespace packserve::testing
