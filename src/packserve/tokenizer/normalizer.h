// normalizer.h: the normalizers a tokenizer.json may name, in order: the Unicode forms (NFC —
// Qwen2 and Qwen3 use it —, NFD, NFKC, NFKD, applied with ICU), and SentencePiece conversions'
// Prepend (a string before a non-empty text) and Replace of a literal string (Llama-2 and
// Mistral up to v0.3: Prepend "▁", Replace " " -> "▁").
// Invariants: an empty Normalizer is the identity; all-ASCII text is returned unchanged
// without calling ICU (every normalization form leaves ASCII alone).
// Thread-safety: const methods are safe to call concurrently (ICU's normalizer instances are
// immutable singletons).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "packserve/common/status.h"

namespace packserve::tokenizer {

enum class NormalizationForm { kNfc, kNfd, kNfkc, kNfkd };

// `text` with every occurrence of `pattern` (non-empty), left to right and not overlapping,
// replaced by `content`: the Replace normalizer's, and SentencePiece's meta space in the decode
// table.
std::string replace_all(std::string_view text, std::string_view pattern, std::string_view content);

class Normalizer {
 public:
  void add(NormalizationForm form) { steps_.push_back(Step{Step::kForm, form, {}, {}}); }
  void add_prepend(std::string prefix) {
    steps_.push_back(Step{Step::kPrepend, {}, std::move(prefix), {}});
  }
  // Precondition: `pattern` is not empty.
  void add_replace(std::string pattern, std::string content) {
    steps_.push_back(Step{Step::kReplace, {}, std::move(pattern), std::move(content)});
  }
  bool empty() const { return steps_.empty(); }
  // Normalizes `text` (valid UTF-8) into `out` (replaced). kInternal when ICU fails.
  Status apply(std::string_view text, std::string& out) const;

 private:
  struct Step {
    enum Kind { kForm, kPrepend, kReplace } kind;
    NormalizationForm form;
    std::string text;     // kPrepend: the prefix; kReplace: the pattern
    std::string content;  // kReplace: what replaces it
  };
  Status apply_form(NormalizationForm form, std::string& text) const;

  std::vector<Step> steps_;
};

}  // namespace packserve::tokenizer
