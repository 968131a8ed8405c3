// random_batch.h: seeded random batch specs for property tests (issue 2 "Tests"), shared by
// the CPU executor tests and, later, the CUDA kernel tests.
//
// A draw covers: long-tailed (lognormal) lengths, page sizes 1/16/64 (rarely 2/3/128/256),
// GQA group sizes 1/4/8 with 1 or 2 KV heads, head_dim 64/128/256, dtypes f32/f16/bf16,
// prefix forests of depth 1 to 3 (node lengths of exactly one page included), mixed decode
// (q_len 1), full prefill and chunked prefill (q_len < own tokens) requests, and the edges:
// kv_len = page_size - 1 / page_size / page_size + 1, a request whose whole context before its
// query rows is its shared prefix ("all pages shared"), and one very long decode request among
// many short ones. Sizes are bounded by RandomBatchOptions::max_work, so a batch runs in
// milliseconds on one core.
// Same seed => same spec on every platform (common/rng.h). Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "packserve/attention/batch_spec.h"
#include "packserve/common/dtype.h"
#include "packserve/common/status.h"

namespace packserve::testing {

struct RandomBatchOptions {
  // Upper bound on sum over requests of q_len * kv_len * num_qo_heads * head_dim (the
  // multiply-adds of Q·K; P·V costs the same again).
  int64_t max_work = 6'000'000;
  int max_requests = 12;      // requests drawn: 1 .. max_requests (fewer if the budget runs out)
  std::vector<DType> dtypes;  // drawn from these; empty = f32, f16 and bf16
  // A float8 KV cache (BatchSpec::kv_fp8); a drawn f32 dtype becomes bf16.
  bool kv_fp8 = false;
  bool allow_prefixes = true;
  // Fixed shape fields; 0 = draw as described above.
  int num_qo_heads = 0;  // with num_kv_heads
  int num_kv_heads = 0;
  int head_dim = 0;
  int page_size = 0;
};

// A valid spec (validate_spec passes) drawn from `seed`.
attention::BatchSpec random_batch_spec(uint64_t seed, const RandomBatchOptions& options = {});

// sum over requests of q_len * kv_len * num_qo_heads * head_dim.
int64_t batch_work(const attention::BatchSpec& spec);

// The batch `others` with the requests of `inserted` placed before request `at` (0 ..
// others.batch_size()). The inserted requests keep their physical page ids, their page
// sharing and their Q/K/V bytes; the pages of `others` are renumbered after them, so the two
// groups share no page. Shapes and dtypes must match (kInvalidArgument otherwise).
Result<attention::BatchData> insert_batch(const attention::BatchData& others,
                                          const attention::BatchData& inserted, int at);

// The batch followed by one sharer per request: a request over exactly the same pages and
// kv_len, with another number of query rows where kv_len allows (1 after a request of several
// rows, else min(kv_len, 40): a prefill beside a decode), its rows' Q copied cyclically from the
// original's rows. Every chunk of a request then has a twin with identical pages whose rows differ
// in number, which is what a deterministic plan must not let change the request's bits.
attention::BatchData with_sharers(const attention::BatchData& batch);

}  // namespace packserve::testing
