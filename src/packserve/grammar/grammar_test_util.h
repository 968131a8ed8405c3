// grammar_test_util.h: helpers for the grammar tests. The byte vocabulary (ids 0..255 are the
// single bytes, 256 is EOS, 257 a special token without bytes) lets a test feed any string
// through a Matcher one byte at a time; the brute-force mask ("feed each token's bytes to a
// fresh copy of the matcher") is the oracle of the trie walk.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/grammar/grammar.h"

namespace packserve::grammar::testing {

inline constexpr int32_t kByteEos = 256;
inline constexpr int32_t kByteSpecial = 257;

inline std::shared_ptr<const Vocabulary> byte_vocabulary() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  tokens.emplace_back();  // EOS
  tokens.emplace_back();  // a special token: never allowed
  return std::make_shared<const Vocabulary>(std::move(tokens), std::vector<int32_t>{kByteEos});
}

// The number of bytes of `text` the matcher accepts, one byte token each, before the first
// rejection (text.size() when all are accepted).
inline std::size_t feed_bytes(Matcher& m, std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!m.accept(static_cast<uint8_t>(text[i])).ok()) return i;
  }
  return text.size();
}

// Whether the whole of `text` is a complete match (byte vocabulary).
inline bool full_match(const Grammar& g, std::string_view text) {
  auto m = g.matcher();
  return feed_bytes(*m, text) == text.size() && m->accepting();
}

// The ids set in a mask.
inline std::set<int32_t> mask_ids(std::span<const uint32_t> mask) {
  std::set<int32_t> ids;
  for (std::size_t w = 0; w < mask.size(); ++w) {
    for (int b = 0; b < 32; ++b) {
      if ((mask[w] >> b) & 1u)
        ids.insert(static_cast<int32_t>(w * 32 + static_cast<std::size_t>(b)));
    }
  }
  return ids;
}

// The ids fill_mask allows now; checks that the count it returns agrees.
inline std::set<int32_t> allowed_ids(Matcher& m, const Vocabulary& vocab) {
  std::vector<uint32_t> mask(static_cast<std::size_t>(vocab.mask_words()), 0xDEADBEEFu);
  const int64_t count = m.fill_mask(mask);
  std::set<int32_t> ids = mask_ids(mask);
  EXPECT_EQ(count, static_cast<int64_t>(ids.size()));
  return ids;
}

// The oracle: a token is allowed iff a matcher that has accepted `prefix` (token ids) then
// accepts it. Builds a fresh matcher per token.
inline std::set<int32_t> brute_force_ids(const Grammar& g, const std::vector<int32_t>& prefix) {
  std::set<int32_t> ids;
  const Vocabulary& vocab = g.vocabulary();
  for (int32_t t = 0; t < vocab.size(); ++t) {
    auto m = g.matcher();
    for (const int32_t p : prefix) EXPECT_TRUE(m->accept(p).ok());
    if (m->accept(t).ok()) ids.insert(t);
  }
  return ids;
}

}  // namespace packserve::grammar::testing
