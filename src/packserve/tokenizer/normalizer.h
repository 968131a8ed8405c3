// normalizer.h: the Unicode normalizers a byte-level tokenizer.json may name (NFC — Qwen2 and
// Qwen3 use it —, NFD, NFKC, NFKD, and a Sequence of them), applied with ICU.
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

class Normalizer {
 public:
  void add(NormalizationForm form) { forms_.push_back(form); }
  bool empty() const { return forms_.empty(); }
  // Normalizes `text` (valid UTF-8) into `out` (replaced). kInternal when ICU fails.
  Status apply(std::string_view text, std::string& out) const;

 private:
  std::vector<NormalizationForm> forms_;
};

}  // namespace packserve::tokenizer
