// synthetic_vocabulary.h: a seeded synthetic vocabulary shaped like a real byte-level BPE
// one (the 256 single bytes, then words with and without a leading space, numbers, JSON-ish
// punctuation and whitespace runs, non-ASCII characters, some split mid-character; 1-20
// bytes each; the last id is EOS) for the grammar timing test and bench/cpu/grammar_bench.cc.
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "packserve/grammar/grammar.h"

namespace packserve::grammar::testing {

inline std::shared_ptr<const Vocabulary> synthetic_vocabulary(int32_t num_tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  static const char* kPunct[] = {
      "{",  "}",  "[",    "]",    "\"", ":",   ",",  "\":", "\",", "{\"", "\"}",  "\":\"",
      "\n", "  ", "    ", "\n  ", ".",  "\\n", "\\", "\\u", "},",  "],",  "\": ", ", \""};
  static const char* kNonAscii[] = {"\xC3\xA9",     "\xCF\x89",         "\xCE\xB1", "\xE4\xB8\xAD",
                                    "\xE6\x96\x87", "\xF0\x9F\x98\x80", "\xD0\xBF"};
  std::vector<std::string> tokens;
  tokens.reserve(static_cast<std::size_t>(num_tokens));
  for (int b = 0; b < 256 && static_cast<int32_t>(tokens.size()) < num_tokens - 1; ++b) {
    tokens.emplace_back(1, static_cast<char>(b));
  }
  while (static_cast<int32_t>(tokens.size()) < num_tokens - 1) {
    std::string t;
    const uint32_t kind = pick(100);
    if (kind < 70) {  // a word, mostly with a leading space
      if (kind < 42) t += ' ';
      const uint32_t len = 2 + pick(pick(2) == 0 ? 6 : 12);
      for (uint32_t i = 0; i < len; ++i) t += static_cast<char>('a' + pick(26));
      if (pick(8) == 0) t[t.size() - len] = static_cast<char>('A' + pick(26));
    } else if (kind < 80) {  // a number
      if (pick(3) == 0) t += ' ';
      for (uint32_t i = 1 + pick(3); i > 0; --i) t += static_cast<char>('0' + pick(10));
    } else if (kind < 90) {  // punctuation and whitespace
      for (uint32_t i = 1 + pick(3); i > 0; --i) t += kPunct[pick(std::size(kPunct))];
    } else {  // non-ASCII, sometimes cut mid-character
      if (pick(2) == 0) t += ' ';
      for (uint32_t i = 1 + pick(3); i > 0; --i) t += kNonAscii[pick(std::size(kNonAscii))];
      if (pick(4) == 0) t.pop_back();
    }
    if (t.size() > 20) t.resize(20);
    tokens.push_back(std::move(t));
  }
  const auto eos = static_cast<int32_t>(tokens.size());
  tokens.emplace_back();
  return std::make_shared<const Vocabulary>(std::move(tokens), std::vector<int32_t>{eos});
}

}  // namespace packserve::grammar::testing
