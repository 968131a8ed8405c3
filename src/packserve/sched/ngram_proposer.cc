// ngram_proposer.cc: prompt-lookup drafts (ngram_proposer.h).
#include "packserve/sched/ngram_proposer.h"

#include <fmt/format.h>

#include <algorithm>

namespace packserve::sched {

Status validate_speculation(const NgramSpeculation& spec) {
  if (spec.num_speculative_tokens < 0 || spec.num_speculative_tokens > kMaxSpeculativeTokens) {
    return invalid_argument(
        fmt::format("num_speculative_tokens: expected an integer in [0, {}], got {}",
                    kMaxSpeculativeTokens, spec.num_speculative_tokens));
  }
  if (spec.prompt_lookup_min < 1 || spec.prompt_lookup_max < spec.prompt_lookup_min ||
      spec.prompt_lookup_max > kMaxSpeculativeNgram) {
    return invalid_argument(
        fmt::format("prompt_lookup_min, prompt_lookup_max: expected 1 <= prompt_lookup_min <= "
                    "prompt_lookup_max <= {}, got {} and {}",
                    kMaxSpeculativeNgram, spec.prompt_lookup_min, spec.prompt_lookup_max));
  }
  return ok_status();
}

void propose_ngram_drafts(std::span<const kv::TokenId> tokens, int32_t prompt_lookup_min,
                          int32_t prompt_lookup_max, int32_t max_drafts,
                          std::vector<kv::TokenId>& drafts) {
  drafts.clear();
  const auto n = static_cast<int64_t>(tokens.size());
  if (max_drafts <= 0 || n < 2) return;
  const kv::TokenId last = tokens[static_cast<size_t>(n - 1)];
  // An occurrence ends at p < n - 1 (a token follows it); its length is how far
  // tokens[.. p] and tokens[.. n - 1] agree backwards, capped at prompt_lookup_max and at p + 1.
  int64_t best_end = -1;
  int32_t best_len = 0;
  for (int64_t p = n - 2; p >= 0 && best_len < prompt_lookup_max; --p) {
    if (tokens[static_cast<size_t>(p)] != last) continue;
    const auto cap = static_cast<int32_t>(std::min<int64_t>(prompt_lookup_max, p + 1));
    int32_t len = 1;
    while (len < cap &&
           tokens[static_cast<size_t>(p - len)] == tokens[static_cast<size_t>(n - 1 - len)]) {
      ++len;
    }
    if (len > best_len) {  // the most recent of each length is seen first
      best_len = len;
      best_end = p;
    }
  }
  if (best_len < prompt_lookup_min) return;
  const int64_t begin = best_end + 1;
  const int64_t end = std::min<int64_t>(n, begin + max_drafts);
  drafts.assign(tokens.begin() + begin, tokens.begin() + end);
}

}  // namespace packserve::sched
