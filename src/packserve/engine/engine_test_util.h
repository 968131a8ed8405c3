// engine_test_util.h: a fake ForwardBackend and helpers for the engine tests. Test-only.
//
// FakeBackend keeps a fake KV pool that stores the token id of every (page, slot) the engine
// asks it to write, applies page copies, and computes each sampling row's logits from the
// context it reads back through the request's page table -- positions 0 .. its own, exactly
// what attention would see. So a wrong page table, a lost copy-on-write or a wrong position
// changes the tokens, and expected outputs come from running `next_token` on plain vectors
// (reference_greedy()), never from the engine.
// Logits of a row: 8.0 at next_token(context), and -0.01 * ((7 v + len) % 97) elsewhere, so
// greedy picks next_token and sampling at temperature 1 usually does (p ~ 0.9).
// Thread-safety: forward() runs on the engine thread; the knobs are atomics or set before use.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "packserve/common/argmax.h"
#include "packserve/common/sample_draw.h"
#include "packserve/engine/engine.h"
#include "packserve/tokenizer/tokenizer.h"
#include "packserve/tokenizer/tokenizer_test_util.h"

namespace packserve::engine::testing {

using NextTokenFn = std::function<int32_t(const std::vector<int32_t>& context)>;

constexpr int32_t kEosId = 300;  // "<|im_start|>" in the test tokenizer (special)

// 'a' + (sum_i (i + 1) * tok_i) % 26: depends on every token and its position.
inline int32_t hash_next_token(const std::vector<int32_t>& context) {
  uint64_t h = 0;
  for (size_t i = 0; i < context.size(); ++i) h += (i + 1) * static_cast<uint64_t>(context[i]);
  return static_cast<int32_t>('a' + h % 26);
}

inline void fake_logits(const std::vector<int32_t>& context, int32_t next, int64_t vocab,
                        float* out) {
  for (int64_t v = 0; v < vocab; ++v) {
    out[v] = v == next
                 ? 8.0f
                 : -0.01f * static_cast<float>((7 * v + static_cast<int64_t>(context.size())) % 97);
  }
}

class FakeBackend : public model::ForwardBackend {
 public:
  FakeBackend(int64_t vocab_size, int32_t num_pages, int32_t page_size, NextTokenFn next)
      : page_size_(page_size), next_(std::move(next)) {
    config_.vocab_size = vocab_size;
    config_.hidden_size = 8;
    config_.intermediate_size = 16;
    config_.num_layers = 1;
    config_.num_qo_heads = 1;
    config_.num_kv_heads = 1;
    config_.head_dim = 8;
    config_.max_position_embeddings = 4096;
    config_.eos_token_ids = {kEosId};
    kv_.assign(static_cast<size_t>(num_pages) * page_size, -1);
  }

  std::string_view name() const override { return "fake"; }
  void set_rope_scaling(std::optional<model::RopeScaling> s) { config_.rope_scaling = s; }
  void set_sliding_window(int64_t w) { config_.sliding_window = w; }
  const model::ModelConfig& config() const override { return config_; }

  Status forward(const model::ForwardBatch& batch, model::ForwardOutput& out) override {
    {
      std::unique_lock lock(gate_mutex_);
      ++num_forwards_entered_;
      gate_cv_.notify_all();
      gate_cv_.wait(lock, [&] { return !blocked_; });
    }
    if (step_sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_sleep_ms));
    for (int32_t t : batch.token_ids) {
      if (t == fail_on_token.load()) return internal_error("fake backend: poison token");
    }
    for (const kv::PageCopy& c : batch.page_copies) {
      for (int32_t s = 0; s < c.num_tokens; ++s) slot(c.dst_page, s) = slot(c.src_page, s);
    }
    out.logits.clear();
    out.argmax.clear();
    out.sampled.clear();
    out.sampled_logprobs.clear();
    out.top_logprobs.clear();
    out.scores.clear();
    const int64_t vocab = config_.vocab_size;
    std::vector<uint32_t> masks(batch.masks.size());  // model/forward.h: filled late when asked
    if (!masks.empty()) {
      if (batch.fill_masks) ++num_late_mask_fills;
      model::write_masks(batch, masks);
    }
    size_t extra_draw = 0;  // the next ForwardBatch::extra_draws entry
    for (int r = 0; r < batch.num_requests(); ++r) {
      const int32_t q_len = batch.qo_indptr[r + 1] - batch.qo_indptr[r];
      const int32_t kv_len = batch.kv_len[r];
      const int32_t* pages = batch.page_ids.data() + batch.page_indptr[r];
      const int32_t num_pages = batch.page_indptr[r + 1] - batch.page_indptr[r];
      if (num_pages != (kv_len + page_size_ - 1) / page_size_) {
        return invalid_argument("fake backend: page table does not cover kv_len");
      }
      for (int32_t i = 0; i < q_len; ++i) {
        const int32_t pos = kv_len - q_len + i;
        slot(pages[pos / page_size_], pos % page_size_) = batch.token_ids[batch.qo_indptr[r] + i];
      }
      std::vector<int32_t> context;
      for (int32_t pos = 0; pos < kv_len; ++pos) {
        context.push_back(slot(pages[pos / page_size_], pos % page_size_));
      }
      std::vector<float> row(static_cast<size_t>(vocab));
      // Scored rows: row i sees the context up to its own position.
      for (int32_t i = 0;
           !batch.score_indptr.empty() && i < batch.score_indptr[r + 1] - batch.score_indptr[r];
           ++i) {
        const std::vector<int32_t> seen(context.begin(), context.begin() + kv_len - q_len + i + 1);
        fake_logits(seen, next_(seen), vocab, row.data());
        const int32_t target = batch.score_targets[static_cast<size_t>(batch.score_indptr[r] + i)];
        out.scores.push_back(score_row(row, target, batch.score_top[r]));
        ++num_scored_rows;
      }
      if (!batch.samples[r]) continue;
      const auto draw = [&](std::span<const float> logits, const SampleDraw& d) {
        const SampleResult s = sample_draw_adjusted(logits, batch.adjusts_of(r), d);
        out.sampled.push_back(bad_argmax ? -1 : s.token_id);
        out.sampled_logprobs.push_back(s.logprob);
        const int k = d.top_logprobs;  // bad_argmax: one alternative short
        out.top_logprobs.push_back(top_logprobs(logits, bad_argmax && k > 0 ? k - 1 : k));
      };
      // An argmax or draw request's rows before its last (ForwardBatch::extra_rows) first.
      for (int32_t j = batch.argmax_rows_of(r) + batch.draw_rows_of(r) - 1; j > 0; --j) {
        const std::vector<int32_t> seen(context.begin(), context.end() - j);
        fake_logits(seen, next_(seen), vocab, row.data());
        if (batch.samples[r] == model::kOutputArgmax) {
          out.argmax.push_back(argmax_lowest(row));
        } else {
          draw(row, batch.extra_draws[extra_draw++]);
        }
        ++num_draft_rows;
      }
      fake_logits(context, next_(context), vocab, row.data());
      if (const auto mask = model::request_mask(batch, r, masks, vocab); !mask.empty()) {
        model::mask_logits(row, mask);  // forward.h: masked first
        ++num_masked_rows;
      }
      if (batch.samples[r] == model::kOutputArgmax) {
        out.argmax.push_back(bad_argmax ? static_cast<int32_t>(vocab) : argmax_lowest(row));
        ++num_argmax_rows;
      } else if (batch.samples[r] == model::kOutputSample) {
        draw(row, batch.draws[r]);
        ++num_sample_rows;
      } else {
        out.logits.insert(out.logits.end(), row.begin(), row.end());
      }
    }
    return ok_status();
  }

  // Makes forward() wait until unblock(); wait_entered(n) waits for the n-th forward() call.
  void block() {
    std::lock_guard lock(gate_mutex_);
    blocked_ = true;
  }
  void unblock() {
    {
      std::lock_guard lock(gate_mutex_);
      blocked_ = false;
    }
    gate_cv_.notify_all();
  }
  void wait_entered(int64_t n) {
    std::unique_lock lock(gate_mutex_);
    gate_cv_.wait(lock, [&] { return num_forwards_entered_ >= n; });
  }

  std::atomic<int32_t> fail_on_token{-1};
  int step_sleep_ms = 0;
  // stats(): graph_replays counts the forwards entered, capture_seconds is 0.5 per forward.
  model::BackendStats stats() const override {
    std::lock_guard lock(gate_mutex_);
    model::BackendStats s;
    s.graph_replays = num_forwards_entered_;
    s.capture_seconds = 0.5 * static_cast<double>(num_forwards_entered_);
    return s;
  }
  std::atomic<int64_t> num_argmax_rows{0};  // rows served as kOutputArgmax so far
  std::atomic<int64_t> num_sample_rows{0};  // rows served as kOutputSample so far
  std::atomic<int64_t> num_scored_rows{0};  // rows scored (ForwardBatch::score_*) so far
  std::atomic<int64_t> num_draft_rows{0};   // argmax or draw rows before a request's last so far
  std::atomic<int64_t> num_masked_rows{0};  // argmax and sample rows masked so far
  std::atomic<int64_t> num_late_mask_fills{0};  // forwards that called ForwardBatch::fill_masks
  // Return vocab_size (out of range) as the argmax, -1 as a sampled id and one alternative
  // fewer than a draw's top_logprobs.
  std::atomic<bool> bad_argmax{false};

 private:
  int32_t& slot(int32_t page, int32_t s) {
    return kv_[static_cast<size_t>(page) * page_size_ + static_cast<size_t>(s)];
  }
  model::ModelConfig config_;
  int32_t page_size_;
  NextTokenFn next_;
  std::vector<int32_t> kv_;
  mutable std::mutex gate_mutex_;
  std::condition_variable gate_cv_;
  bool blocked_ = false;
  int64_t num_forwards_entered_ = 0;
};

inline tokenizer::Tokenizer make_test_tokenizer() {
  auto t = tokenizer::Tokenizer::from_json_text(
      tokenizer::testing::make_test_tokenizer_json().dump(), "test tokenizer.json");
  return std::move(t).value();
}

// The float64 reference of LogitAdjustments::apply, written from its definition: a token of
// logit_bias gets x + bias; then a token of the prompt or the output (repetition != 1) has x / r
// if x > 0 and x * r otherwise; then one generated c times loses frequency * c + presence;
// each stage rounded to float.
inline std::vector<float> adjusted64(const std::vector<float>& row, const SamplingParams& p,
                                     const std::vector<int32_t>& prompt,
                                     const std::vector<int32_t>& output) {
  std::vector<float> out = row;
  for (size_t v = 0; v < row.size(); ++v) {
    const auto token = static_cast<int32_t>(v);
    const auto count = std::count(output.begin(), output.end(), token);
    const bool seen = count > 0 || std::find(prompt.begin(), prompt.end(), token) != prompt.end();
    double x = row[v];
    for (const auto& [id, bias] : p.logit_bias) {
      if (id == token) x = static_cast<float>(x + bias);
    }
    if (seen && p.repetition_penalty != 1.0) {
      x = static_cast<float>(x > 0.0 ? x / p.repetition_penalty : x * p.repetition_penalty);
    }
    if (count > 0) {
      x = static_cast<float>(x - p.frequency_penalty * static_cast<double>(count) -
                             p.presence_penalty);
    }
    out[v] = static_cast<float>(x);
  }
  return out;
}

// Greedy reference: the fake model run on a plain vector, stopping at `stop_ids`.
inline std::vector<int32_t> reference_greedy(const NextTokenFn& next, std::vector<int32_t> prompt,
                                             int32_t max_tokens,
                                             const std::vector<int32_t>& stop_ids) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < max_tokens; ++i) {
    const int32_t t = next(prompt);
    out.push_back(t);
    prompt.push_back(t);
    if (std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end()) break;
  }
  return out;
}

// Everything a stream delivered, concatenated.
struct Collected {
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;
  std::vector<std::vector<TopLogprob>> top_logprobs;  // per token
  std::string text;
  std::vector<std::string> deltas;
  RequestOutput last;
  int num_updates = 0;
  bool finished = false;
  std::vector<float> last_prompt_logits;
  std::vector<TokenOutput> prompt_logprobs;
  int num_prompt_logprobs_updates = 0;  // updates that carried prompt_logprobs
};

inline Collected collect(RequestStream& stream,
                         std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  Collected c;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!c.finished && std::chrono::steady_clock::now() < deadline) {
    auto u = stream.next(std::chrono::milliseconds(100));
    if (!u) continue;
    ++c.num_updates;
    for (const TokenOutput& t : u->tokens) {
      c.token_ids.push_back(t.token_id);
      if (t.logprob) c.logprobs.push_back(*t.logprob);
      c.top_logprobs.push_back(t.top_logprobs);
    }
    c.text += u->text_delta;
    c.deltas.push_back(u->text_delta);
    if (!u->last_prompt_logits.empty()) c.last_prompt_logits = u->last_prompt_logits;
    if (!u->prompt_logprobs.empty()) {
      c.prompt_logprobs = u->prompt_logprobs;
      ++c.num_prompt_logprobs_updates;
    }
    c.finished = u->finished;
    c.last = std::move(*u);
  }
  return c;
}

}  // namespace packserve::engine::testing
