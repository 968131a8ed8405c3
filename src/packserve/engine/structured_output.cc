// structured_output.cc: see structured_output.h.
#include "packserve/engine/structured_output.h"

namespace packserve::engine {
namespace {

// A key naming the constraint exactly: its kind, then length-prefixed strings.
std::string cache_key(const StructuredOutput& s) {
  std::string key(1, static_cast<char>(s.kind));
  auto add = [&](const std::string& x) {
    key += std::to_string(x.size());
    key += ':';
    key += x;
  };
  add(s.spec);
  for (const std::string& c : s.choices) add(c);
  add(s.spelt_out);
  key += s.whitespace ? "w" : "-";  // after the lengths-prefixed parts: unambiguous
  if (s.whitespace) add(*s.whitespace);
  return key;
}

}  // namespace

GrammarCache::GrammarCache(tokenizer::Tokenizer tok, int64_t vocab_size,
                           std::vector<int32_t> eos_ids)
    : tok_(std::move(tok)), vocab_size_(vocab_size), eos_ids_(std::move(eos_ids)) {}

std::shared_ptr<const grammar::Vocabulary> make_vocabulary(const tokenizer::Tokenizer& tok,
                                                           int64_t vocab_size,
                                                           std::span<const int32_t> eos_ids) {
  std::vector<std::string> bytes(static_cast<size_t>(vocab_size));
  const auto known = static_cast<int64_t>(tok.vocab_size());
  for (int64_t id = 0; id < vocab_size && id < known; ++id) {
    const auto t = static_cast<tokenizer::TokenId>(id);
    if (tok.is_special(t)) continue;
    std::string b;
    if (tok.append_token_bytes(t, {}, b).ok()) bytes[static_cast<size_t>(id)] = std::move(b);
  }
  std::vector<int32_t> eos;
  for (int32_t id : eos_ids) {
    if (id >= 0 && id < vocab_size) eos.push_back(id);
  }
  return std::make_shared<const grammar::Vocabulary>(std::move(bytes), std::move(eos));
}

std::shared_ptr<const grammar::Vocabulary> GrammarCache::vocabulary() {
  if (vocab_ == nullptr) vocab_ = make_vocabulary(tok_, vocab_size_, eos_ids_);
  return vocab_;
}

std::shared_ptr<const grammar::Vocabulary> GrammarCache::shared_vocabulary() {
  std::lock_guard lock(mutex_);
  return vocabulary();
}

Result<std::shared_ptr<const grammar::Grammar>> GrammarCache::get(const StructuredOutput& s) {
  const std::string key = cache_key(s);
  std::shared_ptr<const grammar::Vocabulary> vocab;
  {
    std::lock_guard lock(mutex_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (it->first == key) {
        lru_.splice(lru_.begin(), lru_, it);
        return lru_.front().second;
      }
    }
    vocab = vocabulary();
  }
  // Compiled outside the lock: a large schema must not hold up other submissions.
  using Compiled = Result<std::shared_ptr<const grammar::Grammar>>;
  Compiled g = [&]() -> Compiled {
    using Kind = StructuredOutput::Kind;
    switch (s.kind) {
      case Kind::kJsonObject:
        if (s.whitespace && !s.whitespace->empty()) {
          return invalid_argument("a whitespace pattern applies to a JSON schema only");
        }
        return grammar::Grammar::json_object(vocab, /*allow_whitespace=*/!s.whitespace);
      case Kind::kJsonSchema:
        return grammar::Grammar::json_schema(s.spec, vocab, s.whitespace);
      case Kind::kRegex:
        if (!s.spelt_out.empty()) {
          return grammar::Grammar::regex_with_json_values(s.spec, s.spelt_out, vocab);
        }
        return grammar::Grammar::regex(s.spec, vocab);
      case Kind::kChoice:
        return grammar::Grammar::choice(s.choices, vocab);
      case Kind::kGrammar:
        return grammar::Grammar::ebnf(s.spec, vocab);
      case Kind::kStructuralTag:
        return grammar::Grammar::structural_tag(s.spec, vocab);
      case Kind::kNone:
        break;
    }
    return invalid_argument("no constraint");
  }();
  if (!g.ok()) return invalid_argument(s.field + ": " + g.status().message());
  std::lock_guard lock(mutex_);
  lru_.emplace_front(key, *g);
  if (lru_.size() > kCapacity) lru_.pop_back();
  return *g;
}

}  // namespace packserve::engine
