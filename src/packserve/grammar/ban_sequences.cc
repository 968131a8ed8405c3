// ban_sequences.cc: Grammar::ban_sequences (grammar.h), token sequences that may not complete,
// over an optional inner grammar's masks.
#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "packserve/grammar/dfa_grammar.h"
#include "packserve/grammar/grammar.h"
#include "packserve/grammar/wrapped_matcher.h"

namespace packserve::grammar {
namespace {

using Sequences = std::vector<std::vector<int32_t>>;

class BanningMatcher final : public detail::WrappedMatcher {
 public:
  BanningMatcher(std::shared_ptr<const Grammar> inner_grammar,
                 std::shared_ptr<const Sequences> banned, std::size_t history, int32_t vocab_size)
      : WrappedMatcher(std::move(inner_grammar), vocab_size),
        banned_(std::move(banned)),
        history_size_(history) {}

  int64_t fill_mask(std::span<uint32_t> mask) override {
    int64_t allowed = fill_inner_mask(mask);
    for (const std::vector<int32_t>& s : *banned_) {
      if (!completes(s)) continue;
      const auto t = static_cast<std::size_t>(s.back());
      uint32_t& word = mask[t / 32];
      const uint32_t bit = 1u << (t % 32);
      if ((word & bit) != 0) {
        word &= ~bit;
        --allowed;
      }
    }
    return allowed;
  }

  Status accept(int32_t token) override {
    for (const std::vector<int32_t>& s : *banned_) {
      if (s.back() == token && completes(s)) {
        return invalid_argument("token " + std::to_string(token) +
                                " would complete a sequence of bad_words_token_ids");
      }
    }
    PS_RETURN_IF_ERROR(accept_inner(token));
    if (history_size_ > 0) {
      if (history_.size() == history_size_) history_.pop_front();
      history_.push_back(token);
    }
    return ok_status();
  }

 private:
  // Whether the output so far ends with all of `s` but its last token.
  bool completes(const std::vector<int32_t>& s) const {
    const std::size_t prefix = s.size() - 1;
    return prefix <= history_.size() &&
           std::equal(s.begin(), s.end() - 1, history_.end() - static_cast<std::ptrdiff_t>(prefix));
  }

  std::shared_ptr<const Sequences> banned_;
  std::size_t history_size_;     // the longest sequence's length - 1
  std::deque<int32_t> history_;  // the last history_size_ tokens of the output
};

class BanningGrammar final : public Grammar {
 public:
  BanningGrammar(std::shared_ptr<const Grammar> inner, std::shared_ptr<const Vocabulary> vocab,
                 Sequences banned)
      : inner_(std::move(inner)), vocab_(std::move(vocab)) {
    for (const std::vector<int32_t>& s : banned) history_ = std::max(history_, s.size() - 1);
    banned_ = std::make_shared<const Sequences>(std::move(banned));
  }
  std::unique_ptr<Matcher> matcher() const override {
    return std::make_unique<BanningMatcher>(inner_, banned_, history_, vocab_->size());
  }
  const Vocabulary& vocabulary() const override { return *vocab_; }

 private:
  std::shared_ptr<const Grammar> inner_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::shared_ptr<const Sequences> banned_;
  std::size_t history_ = 0;
};

}  // namespace

Result<std::shared_ptr<const Grammar>> Grammar::ban_sequences(
    std::shared_ptr<const Grammar> inner, std::shared_ptr<const Vocabulary> vocab,
    std::span<const std::vector<int32_t>> sequences) {
  PS_RETURN_IF_ERROR(check_vocabulary(vocab));
  if (sequences.empty()) {
    return invalid_argument("bad_words_token_ids: expected at least one sequence");
  }
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const std::string at = "bad_words_token_ids[" + std::to_string(i) + "]";
    if (sequences[i].empty()) return invalid_argument(at + ": expected at least one token id");
    for (std::size_t j = 0; j < sequences[i].size(); ++j) {
      const int32_t id = sequences[i][j];
      if (id < 0 || id >= vocab->size()) {
        return invalid_argument(at + "[" + std::to_string(j) + "]: expected a token id in [0, " +
                                std::to_string(vocab->size()) + "), got " + std::to_string(id));
      }
    }
  }
  return std::shared_ptr<const Grammar>(new BanningGrammar(
      std::move(inner), std::move(vocab), Sequences(sequences.begin(), sequences.end())));
}

}  // namespace packserve::grammar
