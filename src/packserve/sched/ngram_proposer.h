// ngram_proposer.h: draft tokens for speculative decoding by prompt lookup (vLLM's "ngram"
// method; sched::NgramSpeculation, request.h). The request's own tokens (prompt, then output)
// are searched for an earlier occurrence of their last prompt_lookup_max down to prompt_lookup_min
// tokens, and the tokens that followed it are the drafts: text that repeats its context (code
// edits, quotes, structured data, summaries) is then verified several tokens per forward.
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "packserve/common/status.h"
#include "packserve/kv/types.h"
#include "packserve/sched/request.h"

namespace packserve::sched {

// kInvalidArgument naming the bad field of `spec` ("num_speculative_tokens: expected ...").
Status validate_speculation(const NgramSpeculation& spec);

// Fills `drafts` (cleared first) with at most max_drafts tokens: those after the most recent
// earlier occurrence of the longest suffix of `tokens` of prompt_lookup_min to prompt_lookup_max
// tokens (the most recent among the longest); none when no such suffix occurs earlier, or
// max_drafts <= 0. The occurrence may overlap the suffix ("a b a b a b" proposes "a b ..."); the
// drafts stop at the end of `tokens`. Cost: O(tokens.size() * prompt_lookup_max) at worst, one
// backward scan. Requires 1 <= prompt_lookup_min <= prompt_lookup_max.
void propose_ngram_drafts(std::span<const kv::TokenId> tokens, int32_t prompt_lookup_min,
                          int32_t prompt_lookup_max, int32_t max_drafts,
                          std::vector<kv::TokenId>& drafts);

}  // namespace packserve::sched
