// scheduler_state.h: the scheduler's per-request record, shared by scheduler.cc (queues and
// schedule()) and scheduler_commit.cc (commit() and the invariants). Internal to sched/.
// Thread-safety: owned by one Scheduler.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "packserve/sched/scheduler.h"

namespace packserve::sched {

enum class Where { kStaged, kWaiting, kRunning, kFinished };

struct Scheduler::RequestState {
  RequestId id = 0;
  uint64_t serial = 0;
  double arrival_time_ms = 0.0;
  std::vector<TokenId> tokens;  // prompt, then generated tokens
  std::vector<TokenId> stop_token_ids;
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;
  int32_t max_output_tokens = 1;
  Where where = Where::kWaiting;
  int32_t num_computed_tokens = 0;  // mirrors the KV manager while running, else 0
  int32_t max_computed_tokens = 0;  // high-water mark, to count recomputed tokens
  int32_t batch_index = -1;         // index in batch_.sequences while a batch is pending
  int32_t num_preemptions = 0;
  int32_t num_cached_prompt_tokens = 0;
  bool admitted_once = false;
  bool compute_whole_prompt = false;  // Request's
  int32_t priority = 0;               // Request's
  NgramSpeculation speculation;       // Request's
  // This step's decode row when it carries drafts: the last token, then the drafts (the
  // sequence's token_ids).
  std::vector<TokenId> spec_rows;
  // Admission may adopt cached pages (not while the whole prompt must be computed).
  bool adopts_cached() const { return !compute_whole_prompt || num_output_tokens > 0; }
  std::optional<double> first_token_time_ms;
  // The chained keys of tokens' full pages, filled while waiting when the prefix wait looks
  // (kv::full_page_keys); recomputed when tokens grew by a page.
  std::vector<kv::PageKey> page_keys;

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  // A decode row: the prompt is done and only the last sampled token lacks KV.
  bool is_decode() const {
    return num_output_tokens > 0 && num_tokens() - num_computed_tokens == 1;
  }
};

}  // namespace packserve::sched
