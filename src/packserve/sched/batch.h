// batch.h: the contract between the scheduler and whatever runs the model (the engine, or the
// simulator's cost model): one step's ScheduledBatch in, one StepOutput back (seed 003: one
// flat packed forward pass holding prefill chunks and decode rows side by side).
//
// A ScheduledSequence is one request's rows in the step: q_len = num_tokens query rows at
// positions start_position .. start_position + num_tokens - 1, attending to KV positions
// [0, kv_len) through page_ids (its kv_page_indices; the last page holds
// kv_len - (page_ids.size() - 1) * page_size tokens). The engine writes the rows' KV into those
// slots and, when samples_token, samples one token from the last row's logits (a decode row
// with speculative drafts: see num_draft_tokens).
// Invariants of a batch from Scheduler::schedule(): sum of num_tokens <= max_num_batched_tokens;
// at most max_num_running_requests sequences; a request appears at most once; decode rows come
// first, then prefill chunks, each group in admission order; page_copies must run before the
// forward (copy-on-write, kv_cache.h).
// Thread-safety: plain values; the spans point into scheduler-owned storage and are valid until
// the scheduler's next mutating call (commit(), cancel(), add_request(), schedule()).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "packserve/common/status.h"
#include "packserve/kv/kv_cache.h"
#include "packserve/sched/request.h"

namespace packserve::sched {

struct ScheduledSequence {
  RequestId id = 0;
  // false: a decode row (one token: the last sampled one, whose KV is not yet computed).
  // true: a prefill chunk of the prompt, or of prompt + generated tokens when a preempted
  // request is recomputed.
  bool is_prefill = true;
  int32_t start_position = 0;  // tokens whose KV is already computed
  int32_t num_tokens = 0;      // q_len, >= 1
  // True when this chunk ends at the last known token, so its last row's logits give the
  // request's next output token: every decode row, and the final chunk of a prefill.
  bool samples_token = false;
  std::span<const TokenId> token_ids;  // input tokens of the rows, size num_tokens
  // A decode row's speculative drafts (Request::speculation): the last this-many token_ids
  // (after the last sampled token) are proposed output tokens; the row's KV slots cover them.
  // The executor verifies them: draft j is accepted when every draft before it was and it is
  // the token the model chooses at row j (the row before it).
  int32_t num_draft_tokens = 0;
  std::span<const PageId> page_ids;  // pages covering [0, kv_len())
  int32_t kv_len() const { return start_position + num_tokens; }
};

struct ScheduledBatch {
  int64_t step_index = 0;      // 0, 1, ... per schedule() call
  double start_time_ms = 0.0;  // the now_ms passed to schedule()
  std::vector<ScheduledSequence> sequences;
  std::vector<kv::PageCopy> page_copies;
  int32_t num_batched_tokens = 0;  // sum of num_tokens
  int32_t num_decode_rows = 0;
  int32_t num_prefill_tokens = 0;
  bool empty() const { return sequences.empty(); }
};

struct StepOutput {
  // One entry per batch sequence (same order and size as ScheduledBatch::sequences); the entry
  // is read only where samples_token is true.
  std::vector<TokenId> sampled_token_ids;
  // Empty (no drafts accepted), or one entry per batch sequence: how many leading drafts of it
  // were accepted, in [0, num_draft_tokens]; its output tokens are then those drafts followed
  // by sampled_token_ids[i], the model's choice at the row after the last accepted one.
  std::vector<int32_t> num_accepted_drafts;
  double step_duration_ms = 0.0;  // >= 0; the step's tokens are stamped start + duration
};

// The model side of a step. execute() must not call back into the scheduler. An error is
// returned unchanged by Scheduler::step(); the batch is then still pending (see scheduler.h).
class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;
  virtual Result<StepOutput> execute(const ScheduledBatch& batch) = 0;
};

}  // namespace packserve::sched
