// structured_output.h: the engine's side of structured outputs (engine.h StructuredOutput):
// compiling a request's constraint against the model's vocabulary, once per distinct
// constraint (the masks are applied by the backend: model/forward.h ForwardBatch::masks).
//
// The vocabulary (grammar::Vocabulary) is every token id below the model's vocab_size as the
// bytes it decodes to on its own; special tokens and ids the tokenizer lacks (padded
// vocabularies) have none and are never allowed; the model's EOS ids end a complete match.
// It is built on the first structured request (about 150,000 tokens for Qwen3).
// Thread-safety: GrammarCache is thread-safe (submit() runs on the callers' threads).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "packserve/common/status.h"
#include "packserve/engine/engine.h"
#include "packserve/grammar/grammar.h"
#include "packserve/tokenizer/tokenizer.h"

namespace packserve::engine {

class GrammarCache {
 public:
  // Compiled grammars kept (least recently used dropped first).
  static constexpr size_t kCapacity = 64;

  GrammarCache(tokenizer::Tokenizer tok, int64_t vocab_size, std::vector<int32_t> eos_ids);

  // The compiled constraint of `s` (s.active()). kInvalidArgument starting with s.field for a
  // constraint that does not compile, e.g. "response_format: json_schema: /properties/age:
  // keyword \"uniqueItems\" is not supported".
  Result<std::shared_ptr<const grammar::Grammar>> get(const StructuredOutput& s);
  // The model's vocabulary as the grammars see it (built at the first call).
  std::shared_ptr<const grammar::Vocabulary> shared_vocabulary();

 private:
  std::shared_ptr<const grammar::Vocabulary> vocabulary();  // under mutex_

  tokenizer::Tokenizer tok_;
  int64_t vocab_size_;
  std::vector<int32_t> eos_ids_;
  std::mutex mutex_;
  std::shared_ptr<const grammar::Vocabulary> vocab_;
  std::list<std::pair<std::string, std::shared_ptr<const grammar::Grammar>>> lru_;  // newest first
};

// The vocabulary of a model of `vocab_size` ids over `tok` (above); EOS ids outside it are
// dropped.
std::shared_ptr<const grammar::Vocabulary> make_vocabulary(const tokenizer::Tokenizer& tok,
                                                           int64_t vocab_size,
                                                           std::span<const int32_t> eos_ids);

}  // namespace packserve::engine
