// added_tokens.h: the tokens of tokenizer.json's "added_tokens" (special tokens such as
// <|im_start|> and plain added ones such as <think>) and how input text is cut on them
// before the BPE model sees it (HF AddedVocabulary).
// Matching: leftmost-longest, non-overlapping occurrences of the contents; then per token,
//   single_word: the match counts only when not preceded / followed by a word character
//                (alphanumeric or '_');
//   lstrip / rstrip: whitespace before / after the match is swallowed into it;
//   normalized: the token is looked for in normalized text (after the normalizer) instead of
//               in the raw input (a separate AddedTokenSplitter per phase).
// Invariants: segments are in order, non-empty, and cover the text exactly.
// Thread-safety: immutable after construction; const methods are safe concurrently.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/tokenizer/bpe_model.h"

namespace packserve::tokenizer {

struct AddedToken {
  TokenId id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// One piece of the input: either an added token (its id) or text for the model.
struct TextSegment {
  std::string_view text;
  std::optional<TokenId> added_id;
};

class AddedTokenSplitter {
 public:
  AddedTokenSplitter() = default;
  // Uses the tokens of `tokens` whose `normalized` flag equals `normalized`.
  AddedTokenSplitter(const std::vector<AddedToken>& tokens, bool normalized);

  bool empty() const { return patterns_.empty(); }
  // Appends the segments of `text` to `out`.
  void split(std::string_view text, std::vector<TextSegment>& out) const;

 private:
  struct Pattern {
    std::string content;
    TokenId id;
    bool single_word, lstrip, rstrip;
  };
  // Patterns grouped by first byte, longest first within a group (so the first hit at a
  // position is the longest).
  std::vector<Pattern> patterns_;
  std::array<std::vector<std::size_t>, 256> by_first_byte_;
};

}  // namespace packserve::tokenizer
