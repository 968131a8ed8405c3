// prompt_synth.cc: see prompt_synth.h.
#include "packserve/benchclient/prompt_synth.h"

#include <algorithm>

namespace packserve::benchclient {
namespace {

// splitmix64: a fixed, platform-independent mix of (key, i).
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

bool is_word(const std::string& s) {
  if (s.size() < 2 || s.size() > 13 || s[0] != ' ') return false;
  return std::all_of(s.begin() + 1, s.end(), [](char c) { return c >= 'a' && c <= 'z'; });
}

}  // namespace

Result<PromptSynthesizer> PromptSynthesizer::create(const tokenizer::Tokenizer& tokenizer) {
  std::vector<std::string> words;
  const auto vocab = static_cast<tokenizer::TokenId>(tokenizer.vocab_size());
  for (tokenizer::TokenId id = 0; id < vocab; ++id) {
    if (tokenizer.is_special(id)) continue;
    std::string bytes;
    if (!tokenizer.append_token_bytes(id, tokenizer::DecodeOptions{}, bytes).ok()) continue;
    if (!is_word(bytes)) continue;
    auto ids = tokenizer.encode(bytes);
    if (!ids.ok() || ids->size() != 1 || (*ids)[0] != id) continue;
    words.push_back(std::move(bytes));
  }
  if (words.size() < 16) {
    return failed_precondition(
        "prompt synthesis: the tokenizer has " + std::to_string(words.size()) +
        " single-token words (a space then 1..12 letters a-z); at least 16 are needed");
  }
  return PromptSynthesizer(tokenizer, std::move(words));
}

std::string PromptSynthesizer::segment_text(uint64_t key, int32_t num_tokens) const {
  std::string out;
  const uint64_t seed = mix(key ^ 0x7061636B73657276ull);  // "packserv"
  for (int32_t i = 0; i < num_tokens; ++i) {
    out += words_[mix(seed + static_cast<uint64_t>(i)) % words_.size()];
  }
  return out;
}

Result<SynthesizedPrompt> PromptSynthesizer::synthesize(
    const std::vector<trace::PromptSegment>& segments, int32_t max_tokens) const {
  SynthesizedPrompt p;
  for (const trace::PromptSegment& seg : segments) {
    int32_t n = seg.num_tokens;
    if (max_tokens > 0) n = std::min(n, max_tokens - p.target_tokens);
    if (n <= 0) break;
    p.text += segment_text(seg.key, n);
    p.target_tokens += n;
  }
  if (p.target_tokens < 1) return invalid_argument("prompt synthesis: the prompt has no tokens");
  PS_ASSIGN_OR_RETURN(auto ids, tokenizer_.encode(p.text));
  p.verified_tokens = static_cast<int32_t>(ids.size());
  return p;
}

}  // namespace packserve::benchclient
