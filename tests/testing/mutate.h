// mutate.h: seeded character mutations for the robustness tests of parsers (safetensors
// headers, tokenizer.json, config.json): a mutated input must parse into a value that keeps the
// parser's invariants, or fail with an error naming the file, never crash.
// Same seed => same mutations (common/rng.h). Thread-safety: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "packserve/common/rng.h"

namespace packserve::testing {

// One mutation of `text` at a position drawn from [from, text.size()): a character drawn from
// `alphabet` replaces the one there or is inserted before it, or that character is deleted.
// Nothing when text.size() <= from.
inline void mutate_char(std::string& text, Rng& rng, std::string_view alphabet, size_t from = 0) {
  if (text.size() <= from || alphabet.empty()) return;
  const auto at = static_cast<size_t>(
      rng.uniform_int(static_cast<int64_t>(from), static_cast<int64_t>(text.size()) - 1));
  const char c =
      alphabet[static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(alphabet.size()) - 1))];
  const int64_t kind = rng.uniform_int(0, 2);
  if (kind == 0) {
    text[at] = c;
  } else if (kind == 1) {
    text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c);
  } else {
    text.erase(at, 1);
  }
}

}  // namespace packserve::testing
