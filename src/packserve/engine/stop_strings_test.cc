// stop_strings_test.cc: StopStringMatcher on hand cases and against a brute-force oracle.
#include "packserve/engine/stop_strings.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "packserve/common/rng.h"

namespace packserve::engine {
namespace {

TEST(StopStringsTest, HoldsBackAPossibleStopAndReleasesIt) {
  StopStringMatcher m({"</s>"});
  EXPECT_EQ(m.push("ab<"), "ab");
  EXPECT_EQ(m.push("/"), "");
  EXPECT_EQ(m.num_held_bytes(), 2u);
  EXPECT_EQ(m.push("x"), "</x");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("<"), "");
  EXPECT_EQ(m.flush(), "<");
}

TEST(StopStringsTest, MatchAcrossChunksDropsTheStopAndTheRest) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(m.push("he"), "he");
  EXPECT_EQ(m.push("llo E"), "llo ");
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("D and more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("later"), "");
  EXPECT_EQ(m.flush(), "");
}

// Unmatched text (the first min_tokens tokens') goes out whole, a stop string in it included;
// matching starts with the next push, in text from there on.
TEST(StopStringsTest, UnmatchedTextIsEmittedWhole) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(m.push("an END, E", false), "an END, E");
  EXPECT_EQ(m.num_held_bytes(), 0u);
  EXPECT_EQ(m.push("ND", true), "ND");  // "E" + "ND" spans the switch: not a match
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push(" E", true), " ");
  EXPECT_EQ(m.push("ND here", true), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopStringsTest, EarliestOfSeveralStopsWins) {
  StopStringMatcher m({"cd", "bcx", "zz"});
  // "abcd": "cd" at 2; "bcx" never completes.
  EXPECT_EQ(m.push("ab"), "a");  // "b" may start "bcx"
  EXPECT_EQ(m.push("cd"), "b");
  EXPECT_TRUE(m.stopped());
}

TEST(StopStringsTest, OverlappingSelfPrefix) {
  StopStringMatcher m({"aab"});
  EXPECT_EQ(m.push("a"), "");
  EXPECT_EQ(m.push("a"), "");
  EXPECT_EQ(m.push("a"), "a");  // "aaa": the tail "aa" may still become "aab"
  EXPECT_EQ(m.push("b"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopStringsTest, MultiByteCharactersAreNeverCut) {
  // "é" = C3 A9; the stop "é!" shares the lead byte with "ê" = C3 AA.
  StopStringMatcher m({"\xC3\xA9!"});
  EXPECT_EQ(m.push("x\xC3\xAA"), "x\xC3\xAA");
  EXPECT_EQ(m.push("\xC3\xA9"), "");
  EXPECT_EQ(m.push("?"), "\xC3\xA9?");
}

// Oracle: feed the text one character at a time; at the first prefix of the text that ends
// with a stop string, cut before that stop string (the longest one if several end there), or
// after it (include). Also whether a stop string occurs.
std::pair<std::string, bool> reference(const std::string& text,
                                       const std::vector<std::string>& stops,
                                       bool include = false) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t best_len = 0;
    for (const auto& s : stops) {
      if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0) {
        best_len = std::max(best_len, s.size());
      }
    }
    if (best_len > 0) return {text.substr(0, include ? end : end - best_len), true};
  }
  return {text, false};
}

TEST(StopStringsTest, IncludeMatchKeepsTheStopString) {
  StopStringMatcher m({"END"}, /*include_match=*/true);
  EXPECT_EQ(m.push("abE"), "ab");
  EXPECT_EQ(m.push("NDxyz"), "END");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStringsTest, RandomChunkingMatchesTheOracle) {
  Rng rng(2024);
  for (int trial = 0; trial < 3000; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    auto random_string = [&](int min_len, int max_len) {
      std::string s;
      const auto n = rng.uniform_int(min_len, max_len);
      for (int64_t i = 0; i < n; ++i) s += static_cast<char>('a' + rng.uniform_int(0, 2));
      return s;
    };
    std::vector<std::string> stops;
    const auto num_stops = rng.uniform_int(1, 3);
    for (int64_t i = 0; i < num_stops; ++i) stops.push_back(random_string(1, 4));
    const std::string text = random_string(0, 24);
    const bool include = trial % 2 == 1;
    StopStringMatcher m(stops, include);
    std::string out;
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t len = static_cast<size_t>(rng.uniform_int(1, 4));
      out += m.push(std::string_view(text).substr(pos, len));
      pos += len;
      const std::string expected = reference(text, stops, include).first;
      // Never emits beyond the oracle's text.
      std::string stops_text;
      for (const auto& st : stops) stops_text += "[" + st + "]";
      ASSERT_LE(out.size(), expected.size()) << text << " stops " << stops_text << " out " << out;
      ASSERT_EQ(out, expected.substr(0, out.size()));
    }
    out += m.flush();
    EXPECT_EQ(out, reference(text, stops, include).first);
    EXPECT_EQ(m.stopped(), reference(text, stops).second);
  }
}

}  // namespace
}  // namespace packserve::engine
