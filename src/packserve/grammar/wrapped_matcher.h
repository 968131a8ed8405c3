// wrapped_matcher.h: the part shared by the grammars that narrow another grammar's tokens
// (Grammar::restrict_tokens, restrict_tokens.cc; Grammar::ban_sequences, ban_sequences.cc): a
// matcher over an optional inner grammar's, whose masks and accepts it starts from and whose
// accepting and finished it passes on; without one, every token of the vocabulary is allowed
// and every output is a complete match. Internal to the grammar library.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include "packserve/grammar/grammar.h"

namespace packserve::grammar::detail {

class WrappedMatcher : public Matcher {
 public:
  bool accepting() const override { return inner_ == nullptr || inner_->accepting(); }
  bool finished() const override { return inner_ != nullptr && inner_->finished(); }

 protected:
  // inner_grammar (null: none) stays alive as long as the matcher.
  WrappedMatcher(std::shared_ptr<const Grammar> inner_grammar, int32_t vocab_size)
      : inner_grammar_(std::move(inner_grammar)),
        inner_(inner_grammar_ != nullptr ? inner_grammar_->matcher() : nullptr),
        vocab_size_(vocab_size) {}

  // The inner grammar's mask, or every token of the vocabulary (no bit past its end); returns
  // the number of tokens allowed.
  int64_t fill_inner_mask(std::span<uint32_t> mask) {
    if (inner_ != nullptr) return inner_->fill_mask(mask);
    std::fill(mask.begin(), mask.end(), ~0u);
    if (const int32_t tail = vocab_size_ % 32; tail != 0) {
      mask.back() = (1u << static_cast<unsigned>(tail)) - 1;
    }
    return vocab_size_;
  }
  Status accept_inner(int32_t token) {
    return inner_ != nullptr ? inner_->accept(token) : ok_status();
  }

 private:
  std::shared_ptr<const Grammar> inner_grammar_;
  std::unique_ptr<Matcher> inner_;
  int32_t vocab_size_;
};

}  // namespace packserve::grammar::detail
