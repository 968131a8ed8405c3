// forward.h: the backend interface of one model forward over a flat packed batch (DESIGN.md
// "Data flow of one engine step"; issue 4 "Forward and sampling").
//
// A ForwardBatch is one engine step: requests' rows side by side (prefill chunks and decode
// rows). Request r owns rows qo_indptr[r] .. qo_indptr[r+1): token_ids at positions
// kv_len[r] - q_len[r] + i; its KV pages are page_ids[page_indptr[r] .. page_indptr[r+1])
// covering [0, kv_len[r]) (the scheduler's page table, kv::PageId). The forward writes the rows'
// K/V into those pages (KV append), runs attention with one plan for all layers, and returns
// for the last row of each request with samples[r] != kNoOutput either its logits
// (kOutputLogits), only their argmax (kOutputArgmax: greedy sampling without logprobs; by
// the rules of common/argmax.h; with extra_rows[r] also of the rows before the last, which
// verify speculative drafts), or only the token of a draw (kOutputSample: sample_draw of
// common/sample_draw.h with draws[r], and its logprob when draws[r].logprob; with extra_rows[r]
// also of the rows before the last, each with its extra_draws entry; with the logit
// bias and penalties adjusts[adjust_indptr[r] .. adjust_indptr[r+1]) it is
// sample_draw_adjusted's: the draw from the adjusted row, the raw row's logprob; with
// draws[r].top_logprobs = k > 0 also top_logprobs(raw row, k) of sample_draw.h). A GPU backend
// keeps the logits of argmax and sample rows on the device.
// Token masks (structured outputs): a request with mask_index[r] = k >= 0 (kOutputArgmax or
// kOutputSample only) may only produce the tokens whose bit (t % 32) of
// masks[k * mask_words + t / 32] is set (mask_words = ceil(vocab_size / 32)): the mask applies
// to the raw row first, every other token's logit becoming -inf, so the argmax, the draw, its
// logprob and top_logprobs are those of the masked row (vLLM's structured-output logprobs), and
// adjusts apply after it. A row whose mask allows nothing is all -inf (argmax 0, a draw's
// "maximum infinite" rule of sample_draw.h). With fill_masks set, masks only gives their number
// (its size; its contents are not read): the backend calls fill_masks(dest) once per forward()
// with masks (not when the step fails before), on the calling thread, once it has started the
// work that does not need the masks (the CUDA backend: the layers up to the LM head, so the masks
// are computed while the GPU runs them), and reads dest as masks. Scored rows (prompt logprobs):
// request r's first score_indptr[r+1] - score_indptr[r] rows also return score_row(raw logits of
// the row, target, score_top[r]) of common/sample_draw.h, the target being the next prompt token;
// whether or not the request's last row samples. page_copies (copy-on-write, kv_cache.h) run before
// anything else. Failure contract: an error leaves the KV of pages not written by this batch
// unchanged. Thread-safety: one thread drives a backend.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "packserve/common/sample_draw.h"
#include "packserve/common/status.h"
#include "packserve/kv/kv_cache.h"
#include "packserve/model/config.h"

namespace packserve::model {

// ForwardBatch::samples values: what the last row of a request returns.
inline constexpr uint8_t kNoOutput = 0;
inline constexpr uint8_t kOutputLogits = 1;
inline constexpr uint8_t kOutputArgmax = 2;
inline constexpr uint8_t kOutputSample = 3;

struct ForwardBatch {
  std::vector<int32_t> token_ids;    // [total_rows]
  std::vector<int32_t> qo_indptr;    // [num_requests + 1]
  std::vector<int32_t> kv_len;       // [num_requests], context length after this step's rows
  std::vector<int32_t> page_indptr;  // [num_requests + 1]
  std::vector<int32_t> page_ids;     // [page_indptr.back()]
  std::vector<uint8_t> samples;      // [num_requests]: kNoOutput, kOutputLogits, kOutputArgmax,
                                     // kOutputSample
  // [num_requests] when any samples[r] is kOutputSample (read only for those), else empty.
  std::vector<SampleDraw> draws;
  // [num_requests + 1] or empty (no adjustments): request r's logit bias and penalties are
  // adjusts[adjust_indptr[r] .. adjust_indptr[r+1]), tokens strictly increasing, only for
  // kOutputSample requests (common/logit_adjust.h).
  std::vector<int32_t> adjust_indptr;
  std::vector<LogitAdjust> adjusts;
  // [num_requests] or empty (then masks too): -1 (no mask) or the request's mask in masks.
  std::vector<int32_t> mask_index;
  std::vector<uint32_t> masks;  // [masks, mask_words(vocab_size)]
  // Or null: writes every word of the masks into dest (masks.size() words).
  std::function<void(std::span<uint32_t> dest)> fill_masks;
  // Scored rows, or all three empty: [num_requests + 1] offsets into score_targets; request r
  // scores its first score_indptr[r+1] - score_indptr[r] rows (at most its q_len), row j
  // against token score_targets[score_indptr[r] + j], with score_top[r] (0 to
  // kMaxTopLogprobs) alternatives.
  std::vector<int32_t> score_indptr;
  std::vector<int32_t> score_targets;
  std::vector<uint8_t> score_top;  // [num_requests]
  // [num_requests] or empty: a kOutputArgmax or kOutputSample request also returns the argmax
  // or the draw of the extra_rows[r] rows before its last one (speculative drafts'
  // verification), in row order before its last row's; 0 for any other request; at most
  // q_len - 1; not with a mask, nor (draws) with adjusts.
  std::vector<int32_t> extra_rows;
  // [sum of extra_rows[r] over the kOutputSample requests]: the draws of those rows, request by
  // request, in row order (draws[r] stays the last row's).
  std::vector<SampleDraw> extra_draws;
  std::vector<kv::PageCopy> page_copies;
  int num_requests() const { return static_cast<int>(kv_len.size()); }
  int total_rows() const { return static_cast<int>(token_ids.size()); }
  // The rows whose argmax request r returns (0 unless samples[r] == kOutputArgmax).
  int argmax_rows_of(int r) const { return output_rows_of(r, kOutputArgmax); }
  // The rows whose draw request r returns (0 unless samples[r] == kOutputSample).
  int draw_rows_of(int r) const { return output_rows_of(r, kOutputSample); }
  // Request r's adjusts (empty without adjust_indptr).
  std::span<const LogitAdjust> adjusts_of(int r) const {
    if (adjust_indptr.empty()) return {};
    return std::span<const LogitAdjust>(adjusts).subspan(
        static_cast<size_t>(adjust_indptr[static_cast<size_t>(r)]),
        static_cast<size_t>(adjust_indptr[static_cast<size_t>(r) + 1] -
                            adjust_indptr[static_cast<size_t>(r)]));
  }

 private:
  int output_rows_of(int r, uint8_t kind) const {
    if (samples[static_cast<size_t>(r)] != kind) return 0;
    return 1 + (extra_rows.empty() ? 0 : extra_rows[static_cast<size_t>(r)]);
  }
};

// uint32 words of one token mask of a vocabulary of vocab_size ids.
inline int64_t mask_words(int64_t vocab_size) { return (vocab_size + 31) / 32; }

// The batch's masks into dest (masks.size() words): fill_masks(dest) when set, else a copy.
inline void write_masks(const ForwardBatch& batch, std::span<uint32_t> dest) {
  if (batch.fill_masks) {
    batch.fill_masks(dest);
  } else {
    std::copy(batch.masks.begin(), batch.masks.end(), dest.begin());
  }
}

// Request r's mask within `masks` (the batch's, as write_masks gives them); empty when it has
// none.
inline std::span<const uint32_t> request_mask(const ForwardBatch& batch, int r,
                                              std::span<const uint32_t> masks, int64_t vocab_size) {
  if (batch.mask_index.empty() || batch.mask_index[static_cast<size_t>(r)] < 0) return {};
  const auto words = static_cast<size_t>(mask_words(vocab_size));
  return masks.subspan(static_cast<size_t>(batch.mask_index[static_cast<size_t>(r)]) * words,
                       words);
}

// row[t] = -inf wherever bit (t % 32) of mask[t / 32] is clear (mask: mask_words(row.size())).
inline void mask_logits(std::span<float> row, std::span<const uint32_t> mask) {
  for (size_t t = 0; t < row.size(); ++t) {
    if (((mask[t / 32] >> (t % 32)) & 1u) == 0) row[t] = -__builtin_huge_valf();
  }
}

struct KvPoolShape {
  int32_t num_pages = 0;
  int32_t page_size = 16;
};

// What forward() returns, each in request order.
struct ForwardOutput {
  std::vector<float> logits;  // [requests with kOutputLogits, vocab_size] f32
  // [argmax rows]: argmax_lowest of the logits of each kOutputArgmax request's rows
  // (ForwardBatch::argmax_rows_of: its extra_rows, then its last row).
  std::vector<int32_t> argmax;
  // [draw rows]: each kOutputSample request's rows (ForwardBatch::draw_rows_of: its extra_rows,
  // then its last row; forward_batch.h draw_rows): sample_draw's token,
  std::vector<int32_t> sampled;
  std::vector<float> sampled_logprobs;  // its logprob (0 unless the draw asked for it),
  // and top_logprobs(raw row, the draw's top_logprobs) (empty for 0).
  std::vector<std::vector<TopLogprob>> top_logprobs;
  // [score_targets.size()]: each scored row's score_row, in batch order.
  std::vector<RowScore> scores;
};

// Counts of a backend's steps since its creation: a CUDA backend's graph cache (CPU: zeros).
struct BackendStats {
  int64_t graph_captures = 0;    // steps that captured (and instantiated) a graph of a new shape
  int64_t graph_replays = 0;     // steps that replayed a captured graph
  int64_t graph_evictions = 0;   // graphs dropped to keep at most max_cuda_graphs
  double capture_seconds = 0.0;  // host time of those captures and instantiations
};

class ForwardBackend {
 public:
  virtual ~ForwardBackend() = default;
  virtual std::string_view name() const = 0;  // "cpu", "cuda"
  virtual const ModelConfig& config() const = 0;
  // Runs the batch; `out`'s vectors are resized (their capacity is reused across steps).
  // Errors: kInvalidArgument (sizes, page ids, positions, samples values, draws) with nothing
  // written; kInternal for a device failure.
  virtual Status forward(const ForwardBatch& batch, ForwardOutput& out) = 0;
  virtual BackendStats stats() const { return {}; }
};

}  // namespace packserve::model
