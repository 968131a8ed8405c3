#include "packserve/model/forward_batch.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace packserve::model {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// Checks a CSR offsets array: length n + 1, starts at 0, non-decreasing, ends at `total`.
Status check_indptr(const std::vector<int32_t>& indptr, const char* name, size_t n, size_t total,
                    const char* total_name) {
  if (indptr.size() != n + 1) {
    return invalid_argument(std::string(name) + ": length " + str(indptr.size()) +
                            ", expected num_requests + 1 = " + str(n + 1) +
                            " (num_requests = kv_len.size())");
  }
  if (indptr[0] != 0) {
    return invalid_argument(std::string(name) + "[0] = " + str(indptr[0]) + ": expected 0");
  }
  for (size_t r = 1; r <= n; ++r) {
    if (indptr[r] < indptr[r - 1]) {
      return invalid_argument(std::string(name) + "[" + str(r) + "] = " + str(indptr[r]) + " < " +
                              name + "[" + str(r - 1) + "] = " + str(indptr[r - 1]) +
                              ": offsets must be non-decreasing");
    }
  }
  if (static_cast<size_t>(indptr[n]) != total) {
    return invalid_argument(std::string(name) + "[" + str(n) + "] = " + str(indptr[n]) +
                            ": expected " + total_name + " = " + str(total));
  }
  return ok_status();
}

// The token masks of a batch whose samples passed (forward_batch.h).
Status check_masks(const ForwardBatch& b, const ModelConfig& config) {
  const size_t n = b.kv_len.size();
  const auto words = static_cast<size_t>(mask_words(config.vocab_size));
  if (b.mask_index.empty()) {
    if (b.masks.empty()) return ok_status();
    return invalid_argument("masks: length " + str(b.masks.size()) +
                            " with an empty mask_index, expected 0");
  }
  if (b.mask_index.size() != n) {
    return invalid_argument("mask_index: length " + str(b.mask_index.size()) +
                            ", expected num_requests = " + str(n) + " or 0");
  }
  if (b.masks.size() % words != 0) {
    return invalid_argument("masks: length " + str(b.masks.size()) +
                            ", expected a multiple of mask_words = " + str(words) +
                            " (ceil(vocab_size / 32))");
  }
  const auto num_masks = static_cast<int64_t>(b.masks.size() / words);
  for (size_t r = 0; r < n; ++r) {
    const int32_t k = b.mask_index[r];
    if (k == -1) continue;
    if (k < -1 || k >= num_masks) {
      return invalid_argument("mask_index[" + str(r) + "] = " + str(k) +
                              ": expected -1 or a mask in [0, " + str(num_masks) + ")");
    }
    if (b.samples[r] != kOutputArgmax && b.samples[r] != kOutputSample) {
      return invalid_argument("mask_index[" + str(r) + "] = " + str(k) + " with samples[" + str(r) +
                              "] = " + str(b.samples[r]) +
                              ", expected -1 (masks apply to argmax or sample rows, samples = 2 "
                              "or 3)");
    }
  }
  return ok_status();
}

// The logit adjustments of a batch whose samples passed (forward_batch.h).
Status check_adjusts(const ForwardBatch& b, const ModelConfig& config) {
  const size_t n = b.kv_len.size();
  if (b.adjust_indptr.empty()) {
    if (b.adjusts.empty()) return ok_status();
    return invalid_argument("adjusts: length " + str(b.adjusts.size()) +
                            " with an empty adjust_indptr, expected 0");
  }
  PS_RETURN_IF_ERROR(
      check_indptr(b.adjust_indptr, "adjust_indptr", n, b.adjusts.size(), "adjusts.size()"));
  for (size_t r = 0; r < n; ++r) {
    const int32_t begin = b.adjust_indptr[r], end = b.adjust_indptr[r + 1];
    if (begin != end && b.samples[r] != kOutputSample) {
      return invalid_argument("adjust_indptr: request " + str(r) + " has " + str(end - begin) +
                              " adjusts with samples[" + str(r) + "] = " + str(b.samples[r]) +
                              ", expected 0 (adjusts apply to draws, samples = 3)");
    }
    for (int32_t i = begin; i < end; ++i) {
      const LogitAdjust& a = b.adjusts[static_cast<size_t>(i)];
      const auto at = [i] { return "adjusts[" + str(i) + "]"; };  // only for an error
      if (a.token < 0 || a.token >= config.vocab_size) {
        return invalid_argument(at() + ".token = " + str(a.token) +
                                ": expected in [0, vocab_size = " + str(config.vocab_size) + ")");
      }
      if (i > begin && a.token <= b.adjusts[static_cast<size_t>(i - 1)].token) {
        return invalid_argument(at() + ".token = " + str(a.token) +
                                ": expected above the previous token of request " + str(r) +
                                " (tokens strictly increasing)");
      }
      if ((a.stages & ~kAdjustStages) != 0) {
        return invalid_argument(at() + ".stages = " + str(a.stages) + ": expected bits of " +
                                str(kAdjustStages));
      }
      if (!std::isfinite(a.bias) || !std::isfinite(a.frequency) || !std::isfinite(a.presence) ||
          !std::isfinite(a.repetition) || !(a.repetition > 0.0)) {
        return invalid_argument(at() +
                                ": bias, frequency and presence must be finite and "
                                "repetition finite and > 0");
      }
    }
  }
  return ok_status();
}

// One draw (draws[r] or an extra_draws entry, `name`) by the rules of forward_batch.h.
Status check_draw(const SampleDraw& d, const std::string& name) {
  if (d.greedy > 1 || d.logprob > 1) {
    return invalid_argument(name + ": greedy = " + str(d.greedy) + ", logprob = " + str(d.logprob) +
                            ": expected 0 or 1");
  }
  if (d.top_logprobs > kMaxTopLogprobs || (d.top_logprobs > 0 && !d.logprob)) {
    return invalid_argument(name + ".top_logprobs = " + str(d.top_logprobs) + ": expected in [0, " +
                            str(kMaxTopLogprobs) + "], and 0 unless logprob = 1");
  }
  if (d.greedy) return ok_status();  // nothing else is read but top_logprobs
  if (!(d.inv_temperature > 0.0f) || !std::isfinite(d.inv_temperature)) {
    return invalid_argument(name + ".inv_temperature = " + std::to_string(d.inv_temperature) +
                            ": expected finite and > 0");
  }
  if (!(d.min_p >= 0.0f && d.min_p <= 1.0f)) {
    return invalid_argument(name + ".min_p = " + std::to_string(d.min_p) + ": expected in [0, 1]");
  }
  if (!(d.u >= 0.0 && d.u < 1.0)) {
    return invalid_argument(name + ".u = " + std::to_string(d.u) + ": expected in [0, 1)");
  }
  if (d.top_k < 0) {
    return invalid_argument(name + ".top_k = " + str(d.top_k) + ": expected >= 0 (0 = off)");
  }
  if (!(d.top_p > 0.0 && d.top_p <= 1.0)) {
    return invalid_argument(name + ".top_p = " + std::to_string(d.top_p) + ": expected in (0, 1]");
  }
  return ok_status();
}

// The rows before the last of a batch whose samples, adjusts and masks passed
// (forward_batch.h), and their draws.
Status check_extra_rows(const ForwardBatch& b) {
  const size_t n = b.kv_len.size();
  size_t draws = 0;  // extra_draws expected
  if (!b.extra_rows.empty() && b.extra_rows.size() != n) {
    return invalid_argument("extra_rows: length " + str(b.extra_rows.size()) +
                            ", expected 0 or num_requests = " + str(n));
  }
  for (size_t r = 0; r < b.extra_rows.size(); ++r) {
    const int32_t extra = b.extra_rows[r];
    if (extra == 0) continue;
    const int32_t q_len = b.qo_indptr[r + 1] - b.qo_indptr[r];
    const bool masked = !b.mask_index.empty() && b.mask_index[r] >= 0;
    const bool adjusted = !b.adjust_indptr.empty() && b.adjust_indptr[r + 1] > b.adjust_indptr[r];
    const bool kind = b.samples[r] == kOutputArgmax || b.samples[r] == kOutputSample;
    if (!kind || masked || adjusted || extra < 0 || extra >= q_len) {
      return invalid_argument("extra_rows[" + str(r) + "] = " + str(extra) +
                              ": expected 0, or in [1, q_len - 1 = " + str(q_len - 1) +
                              "] for an argmax or sample request (samples = 2 or 3) without a "
                              "mask or adjusts");
    }
    if (b.samples[r] == kOutputSample) draws += static_cast<size_t>(extra);
  }
  if (b.extra_draws.size() != draws) {
    return invalid_argument("extra_draws: length " + str(b.extra_draws.size()) + ", expected " +
                            str(draws) + " (the extra_rows of sample requests)");
  }
  for (size_t i = 0; i < b.extra_draws.size(); ++i) {
    PS_RETURN_IF_ERROR(check_draw(b.extra_draws[i], "extra_draws[" + str(i) + "]"));
  }
  return ok_status();
}

// The scored rows of a batch whose qo_indptr passed (forward_batch.h).
Status check_scores(const ForwardBatch& b, const ModelConfig& config) {
  const size_t n = b.kv_len.size();
  if (b.score_indptr.empty()) {
    if (b.score_targets.empty() && b.score_top.empty()) return ok_status();
    return invalid_argument("score_targets / score_top: lengths " + str(b.score_targets.size()) +
                            " / " + str(b.score_top.size()) +
                            " with an empty score_indptr, expected 0");
  }
  PS_RETURN_IF_ERROR(check_indptr(b.score_indptr, "score_indptr", n, b.score_targets.size(),
                                  "score_targets.size()"));
  if (b.score_top.size() != n) {
    return invalid_argument("score_top: length " + str(b.score_top.size()) +
                            ", expected num_requests = " + str(n));
  }
  for (size_t r = 0; r < n; ++r) {
    const int32_t scored = b.score_indptr[r + 1] - b.score_indptr[r];
    const int32_t q_len = b.qo_indptr[r + 1] - b.qo_indptr[r];
    if (scored > q_len) {
      return invalid_argument("score_indptr: request " + str(r) + " scores " + str(scored) +
                              " rows, expected at most its q_len = " + str(q_len));
    }
    if (b.score_top[r] > kMaxTopLogprobs) {
      return invalid_argument("score_top[" + str(r) + "] = " + str(b.score_top[r]) +
                              ": expected in [0, " + str(kMaxTopLogprobs) + "]");
    }
  }
  for (size_t i = 0; i < b.score_targets.size(); ++i) {
    if (b.score_targets[i] < 0 || b.score_targets[i] >= config.vocab_size) {
      return invalid_argument("score_targets[" + str(i) + "] = " + str(b.score_targets[i]) +
                              ": expected in [0, vocab_size = " + str(config.vocab_size) + ")");
    }
  }
  return ok_status();
}

}  // namespace

Status validate_kv_pool_shape(const KvPoolShape& pool) {
  if (pool.num_pages < 1) {
    return invalid_argument("kv pool num_pages = " + str(pool.num_pages) + ": expected >= 1");
  }
  if (pool.page_size < attention::kMinPageSize || pool.page_size > attention::kMaxPageSize) {
    return invalid_argument("kv pool page_size = " + str(pool.page_size) + ": expected in [" +
                            str(attention::kMinPageSize) + ", " + str(attention::kMaxPageSize) +
                            "]");
  }
  return ok_status();
}

Status validate_forward_batch(const ForwardBatch& b, const ModelConfig& config,
                              const KvPoolShape& pool) {
  const size_t n = b.kv_len.size();
  PS_RETURN_IF_ERROR(
      check_indptr(b.qo_indptr, "qo_indptr", n, b.token_ids.size(), "token_ids.size()"));
  PS_RETURN_IF_ERROR(
      check_indptr(b.page_indptr, "page_indptr", n, b.page_ids.size(), "page_ids.size()"));
  if (b.samples.size() != n) {
    return invalid_argument("samples: length " + str(b.samples.size()) +
                            ", expected num_requests = " + str(n));
  }
  bool any_draw = false;
  for (size_t r = 0; r < n; ++r) {
    if (b.samples[r] > kOutputSample) {
      return invalid_argument("samples[" + str(r) + "] = " + str(b.samples[r]) +
                              ": expected 0 (no output), 1 (logits), 2 (argmax) or 3 (sample)");
    }
    any_draw = any_draw || b.samples[r] == kOutputSample;
  }
  if (any_draw && b.draws.size() != n) {
    return invalid_argument("draws: length " + str(b.draws.size()) + ", expected num_requests = " +
                            str(n) + " (some samples are 3, sample)");
  }
  for (size_t r = 0; r < n; ++r) {
    if (b.samples[r] == kOutputSample) {
      PS_RETURN_IF_ERROR(check_draw(b.draws[r], "draws[" + str(r) + "]"));
    }
  }
  PS_RETURN_IF_ERROR(check_adjusts(b, config));
  PS_RETURN_IF_ERROR(check_masks(b, config));
  PS_RETURN_IF_ERROR(check_extra_rows(b));
  PS_RETURN_IF_ERROR(check_scores(b, config));
  const int64_t ps = pool.page_size;
  for (size_t r = 0; r < n; ++r) {
    const int32_t q_len = b.qo_indptr[r + 1] - b.qo_indptr[r];
    if (q_len < 1) {
      return invalid_argument("qo_indptr: request " + str(r) + " has q_len = " + str(q_len) +
                              ", expected >= 1");
    }
    if (b.kv_len[r] < q_len) {
      return invalid_argument("kv_len[" + str(r) + "] = " + str(b.kv_len[r]) +
                              ": expected >= q_len = " + str(q_len));
    }
    const int64_t pages = b.page_indptr[r + 1] - b.page_indptr[r];
    const int64_t expected = (static_cast<int64_t>(b.kv_len[r]) + ps - 1) / ps;
    if (pages != expected) {
      return invalid_argument("page_indptr: request " + str(r) + " has " + str(pages) +
                              " pages, expected ceil(kv_len[" + str(r) + "] = " + str(b.kv_len[r]) +
                              " / page_size = " + str(ps) + ") = " + str(expected));
    }
  }
  for (size_t i = 0; i < b.page_ids.size(); ++i) {
    if (b.page_ids[i] < 0 || b.page_ids[i] >= pool.num_pages) {
      return invalid_argument("page_ids[" + str(i) + "] = " + str(b.page_ids[i]) +
                              ": expected a page in [0, num_pages = " + str(pool.num_pages) + ")");
    }
  }
  for (size_t i = 0; i < b.token_ids.size(); ++i) {
    if (b.token_ids[i] < 0 || b.token_ids[i] >= config.vocab_size) {
      return invalid_argument("token_ids[" + str(i) + "] = " + str(b.token_ids[i]) +
                              ": expected in [0, vocab_size = " + str(config.vocab_size) + ")");
    }
  }
  for (size_t i = 0; i < b.page_copies.size(); ++i) {
    const kv::PageCopy& c = b.page_copies[i];
    const std::string field = "page_copies[" + str(i) + "]";
    for (const auto& [page, name] :
         {std::pair{c.src_page, ".src_page"}, std::pair{c.dst_page, ".dst_page"}}) {
      if (page < 0 || page >= pool.num_pages) {
        return invalid_argument(field + name + " = " + str(page) +
                                ": expected a page in [0, num_pages = " + str(pool.num_pages) +
                                ")");
      }
    }
    if (c.src_page == c.dst_page) {
      return invalid_argument(field + ": src_page = dst_page = " + str(c.src_page) +
                              ": expected distinct pages");
    }
    if (c.num_tokens < 1 || c.num_tokens > ps) {
      return invalid_argument(field + ".num_tokens = " + str(c.num_tokens) +
                              ": expected in [1, page_size = " + str(ps) + "]");
    }
  }
  // Every KV slot is written by at most one row: (slot, row) pairs sorted by slot.
  std::vector<std::pair<int64_t, int32_t>> writes;
  writes.reserve(b.token_ids.size());
  const std::vector<int32_t> positions = row_positions(b);
  for (size_t r = 0; r < n; ++r) {
    for (int32_t row = b.qo_indptr[r]; row < b.qo_indptr[r + 1]; ++row) {
      const int32_t p = positions[static_cast<size_t>(row)];
      const int64_t page = b.page_ids[static_cast<size_t>(b.page_indptr[r] + p / ps)];
      writes.emplace_back(page * ps + p % ps, row);
    }
  }
  std::sort(writes.begin(), writes.end());
  for (size_t i = 1; i < writes.size(); ++i) {
    if (writes[i].first == writes[i - 1].first) {
      return invalid_argument("token_ids: rows " + str(writes[i - 1].second) + " and " +
                              str(writes[i].second) + " both write KV page " +
                              str(writes[i].first / ps) + " slot " + str(writes[i].first % ps) +
                              ": expected each slot written by at most one row");
    }
  }
  return ok_status();
}

attention::BatchLayout make_attention_layout(const ForwardBatch& b, const ModelConfig& config,
                                             const KvPoolShape& pool, DType dtype) {
  attention::BatchLayout layout;
  layout.num_qo_heads = static_cast<int>(config.num_qo_heads);
  layout.num_kv_heads = static_cast<int>(config.num_kv_heads);
  layout.head_dim = static_cast<int>(config.head_dim);
  layout.page_size = pool.page_size;
  layout.num_pages = pool.num_pages;
  layout.dtype = dtype;
  layout.qo_indptr = b.qo_indptr;
  layout.kv_page_indptr = b.page_indptr;
  layout.kv_page_indices = b.page_ids;
  layout.kv_last_page_len.resize(b.kv_len.size());
  for (size_t r = 0; r < b.kv_len.size(); ++r) {
    const int32_t pages = b.page_indptr[r + 1] - b.page_indptr[r];
    layout.kv_last_page_len[r] = b.kv_len[r] - (pages - 1) * pool.page_size;
  }
  return layout;
}

std::vector<int32_t> row_positions(const ForwardBatch& b) {
  std::vector<int32_t> positions(b.token_ids.size());
  for (size_t r = 0; r < b.kv_len.size(); ++r) {
    const int32_t q_len = b.qo_indptr[r + 1] - b.qo_indptr[r];
    for (int32_t i = 0; i < q_len; ++i) {
      positions[static_cast<size_t>(b.qo_indptr[r] + i)] = b.kv_len[r] - q_len + i;
    }
  }
  return positions;
}

std::vector<std::pair<int32_t, int>> scored_rows(const ForwardBatch& b) {
  std::vector<std::pair<int32_t, int>> rows;
  rows.reserve(b.score_targets.size());
  for (int r = 0; r < b.num_requests() && !b.score_indptr.empty(); ++r) {
    for (int32_t j = 0; j < b.score_indptr[r + 1] - b.score_indptr[r]; ++j) {
      rows.emplace_back(b.qo_indptr[r] + j, r);
    }
  }
  return rows;
}

void draw_rows(const ForwardBatch& b, std::vector<DrawRow>& out) {
  out.clear();
  size_t extra = 0;  // the next extra_draws entry
  for (int r = 0; r < b.num_requests(); ++r) {
    const int32_t n = b.draw_rows_of(r);
    for (int32_t j = n; j > 1; --j) {
      out.push_back({b.qo_indptr[r + 1] - j, r, &b.extra_draws[extra++]});
    }
    if (n > 0) out.push_back({b.qo_indptr[r + 1] - 1, r, &b.draws[static_cast<size_t>(r)]});
  }
}

}  // namespace packserve::model
