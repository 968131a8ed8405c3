// forward_batch.h: checks of a ForwardBatch (forward.h) against a model and a KV pool, and the
// attention engine's view of it (attention/batch_layout.h). Shared by the forward backends so
// that every backend rejects the same batches with the same messages before writing anything.
//
// Rules of validate_forward_batch (kInvalidArgument naming the field, the index and what was
// expected, e.g. "page_ids[5] = 99: expected a page in [0, num_pages = 64)"):
//   qo_indptr, page_indptr: length num_requests + 1 (num_requests = kv_len.size()), start at
//     0, non-decreasing, end at token_ids.size() / page_ids.size(); samples: num_requests
//     values, each kNoOutput, kOutputLogits, kOutputArgmax or kOutputSample; draws: num_requests
//     values when any is kOutputSample, whose draws[r] have greedy and logprob 0 or 1,
//     top_logprobs in [0, kMaxTopLogprobs] and 0 unless logprob, and (non-greedy) the ranges
//     of temperature_sample.h's SampleDraw;
//   every request has q_len >= 1 and q_len <= kv_len, and exactly ceil(kv_len / page_size)
//     pages (the pages covering [0, kv_len), as the scheduler's page table);
//   adjust_indptr: empty (then adjusts too) or as qo_indptr, ending at adjusts.size(), with
//     entries only for kOutputSample requests; each request's adjusts have tokens strictly
//     increasing in [0, vocab_size), stages in kAdjustStages, finite values, repetition > 0;
//   mask_index: empty (then masks too) or num_requests values, each -1 or (only for
//     kOutputArgmax / kOutputSample requests) a mask in [0, masks.size() / mask_words), masks
//     a multiple of mask_words(vocab_size) long;
//   extra_rows: empty or num_requests values, each 0 or (only for kOutputArgmax requests and
//     kOutputSample requests without adjusts, neither with a mask) in [1, q_len - 1];
//     extra_draws: one per extra row of the kOutputSample requests, each by the rules of draws;
//   score_indptr: empty (then score_targets and score_top too) or as qo_indptr, ending at
//     score_targets.size(), request r scoring at most its q_len rows; score_targets in
//     [0, vocab_size); score_top: num_requests values in [0, kMaxTopLogprobs];
//   page ids and page_copies' pages in [0, num_pages), src != dst, num_tokens in
//     [1, page_size]; token ids in [0, vocab_size);
//   no two rows write the same KV slot (a page shared by two requests is read-only this step).
// An empty batch (no requests, no rows) is valid: only its page_copies run.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "packserve/attention/batch_layout.h"
#include "packserve/common/status.h"
#include "packserve/model/config.h"
#include "packserve/model/forward.h"

namespace packserve::model {

// kInvalidArgument naming the field: num_pages >= 1, page_size in [1, 256].
Status validate_kv_pool_shape(const KvPoolShape& pool);

Status validate_forward_batch(const ForwardBatch& batch, const ModelConfig& config,
                              const KvPoolShape& pool);

// The attention layout of a batch that passed validate_forward_batch with >= 1 request:
// qo_indptr and the page table as given, kv_last_page_len = kv_len - (pages - 1) * page_size,
// num_pages = pool.num_pages.
attention::BatchLayout make_attention_layout(const ForwardBatch& batch, const ModelConfig& config,
                                             const KvPoolShape& pool, DType dtype);

// Position of every row: row i of request r sits at kv_len[r] - q_len[r] + i. [total_rows].
std::vector<int32_t> row_positions(const ForwardBatch& batch);

// Each scored row (score_indptr) as (its row in the batch, its request), in score_targets
// order; empty without scored rows.
std::vector<std::pair<int32_t, int>> scored_rows(const ForwardBatch& batch);

// A row that returns a draw: its row in the batch, its request and its draw (draws[request] or
// an extra_draws entry).
struct DrawRow {
  int32_t row;
  int request;
  const SampleDraw* draw;
};

// The draw rows of a batch that passed validate_forward_batch, in ForwardOutput::sampled order
// (each kOutputSample request's extra rows, then its last row); into `out` (cleared first).
void draw_rows(const ForwardBatch& batch, std::vector<DrawRow>& out);

}  // namespace packserve::model
