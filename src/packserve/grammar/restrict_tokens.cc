// restrict_tokens.cc: Grammar::restrict_tokens (grammar.h), a token set intersected with an
// optional inner grammar's masks.
#include <algorithm>
#include <bit>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "packserve/grammar/dfa_grammar.h"
#include "packserve/grammar/grammar.h"
#include "packserve/grammar/wrapped_matcher.h"

namespace packserve::grammar {
namespace {

using Bits = std::vector<uint32_t>;  // a bit per token

class RestrictedMatcher final : public detail::WrappedMatcher {
 public:
  RestrictedMatcher(std::shared_ptr<const Grammar> inner_grammar,
                    std::shared_ptr<const Bits> allowed, int32_t vocab_size)
      : WrappedMatcher(std::move(inner_grammar), vocab_size), allowed_(std::move(allowed)) {}
  int64_t fill_mask(std::span<uint32_t> mask) override {
    fill_inner_mask(mask);
    int64_t allowed = 0;
    for (size_t w = 0; w < mask.size(); ++w) {
      mask[w] &= (*allowed_)[w];
      allowed += std::popcount(mask[w]);
    }
    return allowed;
  }
  Status accept(int32_t token) override {
    const auto t = static_cast<size_t>(token);
    if (token < 0 || t / 32 >= allowed_->size() || (((*allowed_)[t / 32] >> (t % 32)) & 1u) == 0) {
      return invalid_argument("token " + std::to_string(token) + " is not in allowed_token_ids");
    }
    return accept_inner(token);
  }

 private:
  std::shared_ptr<const Bits> allowed_;
};

class RestrictedGrammar final : public Grammar {
 public:
  RestrictedGrammar(std::shared_ptr<const Grammar> inner, std::shared_ptr<const Vocabulary> vocab,
                    Bits allowed)
      : inner_(std::move(inner)),
        vocab_(std::move(vocab)),
        allowed_(std::make_shared<const Bits>(std::move(allowed))) {}
  std::unique_ptr<Matcher> matcher() const override {
    return std::make_unique<RestrictedMatcher>(inner_, allowed_, vocab_->size());
  }
  const Vocabulary& vocabulary() const override { return *vocab_; }

 private:
  std::shared_ptr<const Grammar> inner_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::shared_ptr<const Bits> allowed_;
};

}  // namespace

Result<std::shared_ptr<const Grammar>> Grammar::restrict_tokens(
    std::shared_ptr<const Grammar> inner, std::shared_ptr<const Vocabulary> vocab,
    std::span<const int32_t> allowed) {
  PS_RETURN_IF_ERROR(check_vocabulary(vocab));
  if (allowed.empty()) return invalid_argument("allowed_token_ids: expected at least one id");
  Bits bits(static_cast<size_t>(vocab->mask_words()), 0);
  for (size_t i = 0; i < allowed.size(); ++i) {
    const int32_t id = allowed[i];
    if (id < 0 || id >= vocab->size()) {
      return invalid_argument("allowed_token_ids[" + std::to_string(i) +
                              "]: expected a token id in [0, " + std::to_string(vocab->size()) +
                              "), got " + std::to_string(id));
    }
    bits[static_cast<size_t>(id) / 32] |= 1u << (static_cast<unsigned>(id) % 32);
  }
  return std::shared_ptr<const Grammar>(
      new RestrictedGrammar(std::move(inner), std::move(vocab), std::move(bits)));
}

}  // namespace packserve::grammar
