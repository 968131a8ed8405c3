// request.h: what a caller submits to the scheduler and what it gets back per step
// (issue 3 "Scheduler"; metrics as DESIGN.md "Metrics" defines them).
//
// Owns: Request (the immutable submission), FinishReason, and the per-step event records from
// which a caller computes TTFT (arrival -> first token), TPOT, TBT (gaps between a request's
// consecutive token times) and TTLT (arrival -> last token).
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "packserve/kv/types.h"

namespace packserve::sched {

using kv::PageId;
using kv::RequestId;
using kv::TokenId;

// Speculative decoding by prompt lookup (vLLM's "ngram" method): while the request decodes, its
// row in a step carries up to num_speculative_tokens draft tokens proposed from its own tokens
// (ngram_proposer.h), and the executor verifies them in the same forward: it reports how many
// lead the model's own choices (StepOutput::num_accepted_drafts), and those, then the token
// it chose after them, are the step's output tokens. A row with drafts has as many as its
// caps allow (a short lookup is padded with its last draft, so that steps have few distinct
// row counts). Drafts never reach past
// max_output_tokens, never cost a preemption (a step short of pages drops them) and take
// their rows from the token budget. num_speculative_tokens = 0: off.
struct NgramSpeculation {
  int32_t num_speculative_tokens = 0;  // drafts per step, in [0, kMaxSpeculativeTokens]
  int32_t prompt_lookup_min = 2;       // in [1, prompt_lookup_max]
  int32_t prompt_lookup_max = 4;       // in [prompt_lookup_min, kMaxSpeculativeNgram]
};
inline constexpr int32_t kMaxSpeculativeTokens = 16;
inline constexpr int32_t kMaxSpeculativeNgram = 64;

struct Request {
  RequestId id = 0;                       // unique among the scheduler's live requests
  double arrival_time_ms = 0.0;           // on the caller's clock (the one passed to schedule())
  std::vector<TokenId> prompt_token_ids;  // >= 1 token
  int32_t max_output_tokens = 1;          // >= 1; reaching it finishes with kLength
  // Sampling one of these finishes the request with kStop; the stop token counts as an output
  // token (it is the last one). Empty: run to max_output_tokens.
  std::vector<TokenId> stop_token_ids;
  // Until its first output token, every prompt token is computed: no prefix-cache adoption
  // and no prefix wait (prompt logprobs need the logits of every prompt row). Its full pages
  // are still published for others.
  bool compute_whole_prompt = false;
  // vLLM's priority: lower runs first. Only SchedulingPolicy::kPriority reads it; any other
  // policy refuses a value other than 0.
  int32_t priority = 0;
  NgramSpeculation speculation;
};

enum class FinishReason {
  kStop,         // sampled a stop token
  kLength,       // produced max_output_tokens
  kCancelled,    // Scheduler::cancel()
  kKvExhausted,  // its tokens cannot fit in the whole KV pool even alone (see scheduler.h)
};
std::string_view finish_reason_name(FinishReason reason);  // "stop", "length", ...

// One output token. Its time is the end of the step that sampled it.
struct TokenEvent {
  RequestId id = 0;
  int32_t output_index = 0;  // 0 = the first output token (TTFT)
  TokenId token_id = 0;
  double time_ms = 0.0;
};

// A request that left the scheduler; its pages are already returned.
struct FinishedRequest {
  RequestId id = 0;
  FinishReason reason = FinishReason::kLength;
  double arrival_time_ms = 0.0;
  std::optional<double> first_token_time_ms;  // empty when no token was produced
  double finish_time_ms = 0.0;                // time of the last token, or of the cancel/refusal
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;
  int32_t num_preemptions = 0;           // times it was preempted and recomputed
  int32_t num_cached_prompt_tokens = 0;  // prefix-cache hit at its first admission
};

// Everything that happened to requests in one step (or, for cancel() and preemptions, since
// the previous step's events were returned).
struct StepEvents {
  double end_time_ms = 0.0;        // start time + the executor's step duration
  std::vector<TokenEvent> tokens;  // in batch order
  std::vector<FinishedRequest> finished;
  std::vector<RequestId> preempted;  // freed and requeued for recompute
};

}  // namespace packserve::sched
