// prompt_synth.h: prompt *texts* of exact token lengths for replaying a trace against a
// server, so the server's tokenizer sees the trace's lengths and its prefix cache sees the
// trace's sharing (issue 5 "Benchmark client").
//
// Method: from the tokenizer's vocabulary pick the *words*: strings " w" (a space, then 1..12
// ASCII lower-case letters) that encode to exactly one token. Every pre-tokenizer regex of the
// byte-level BPE families we load (GPT-2, Llama-3, Qwen2/3) cuts text before each
// space+letters run, so a text of N such words is N pre-tokens of one token each: N tokens,
// and the tokens of a word do not depend on its neighbours. A trace request's prompt is its
// segments (request_trace.h) in order; segment (key, n) is the first n words of the
// deterministic word sequence of `key` (word i = pool[hash(key, i) % pool size]). Equal keys
// (Mooncake's hash ids) therefore give equal text and equal token ids; a partial last block is
// a prefix of the full block.
// Verification: synthesize() encodes the finished text and reports the actual count; callers
// count mismatches (none are expected; a tokenizer whose regex breaks the word rule shows up
// there, not silently).
// Thread-safety: const methods are thread-safe (the tokenizer is); the block cache is locked.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "packserve/common/status.h"
#include "packserve/tokenizer/tokenizer.h"
#include "packserve/trace/request_trace.h"

namespace packserve::benchclient {

struct SynthesizedPrompt {
  std::string text;
  int32_t target_tokens = 0;    // what the trace (after caps) asked for
  int32_t verified_tokens = 0;  // tokenizer.encode(text).size()
};

class PromptSynthesizer {
 public:
  // Scans the vocabulary for single-token words. kFailedPrecondition when fewer than 16 exist
  // (the message says what was looked for).
  static Result<PromptSynthesizer> create(const tokenizer::Tokenizer& tokenizer);

  // The text of `segments` (sum of num_tokens tokens). `max_tokens` > 0 truncates the prompt to
  // its first max_tokens tokens (shared prefixes stay shared).
  Result<SynthesizedPrompt> synthesize(const std::vector<trace::PromptSegment>& segments,
                                       int32_t max_tokens = 0) const;
  // The first `num_tokens` words of key's sequence, concatenated.
  std::string segment_text(uint64_t key, int32_t num_tokens) const;
  size_t num_words() const { return words_.size(); }

 private:
  PromptSynthesizer(tokenizer::Tokenizer tokenizer, std::vector<std::string> words)
      : tokenizer_(std::move(tokenizer)), words_(std::move(words)) {}
  tokenizer::Tokenizer tokenizer_;
  std::vector<std::string> words_;  // sorted by token id, so the choice is deterministic
};

}  // namespace packserve::benchclient
