// pre_tokenizer_test.cc: the split regexes and behaviours on inputs whose pieces are worked
// out by hand from the pattern, and the claim of pre_tokenizer.h that \s in a compiled pattern
// is exactly Unicode White_Space (25 code points, PropList.txt), as Oniguruma's \s is.
#include <gtest/gtest.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <deque>

#include "packserve/tokenizer/pre_tokenizer.h"
#include "packserve/tokenizer/tokenizer_test_util.h"
#include "packserve/tokenizer/utf8.h"

namespace packserve::tokenizer {
namespace {

std::vector<std::string> split(const PreTokenizer& pre, std::string_view text) {
  std::vector<std::string_view> pieces;
  std::deque<std::string> storage;
  EXPECT_TRUE(pre.run(text, pieces, storage).ok());
  return {pieces.begin(), pieces.end()};
}

PreTokenizer regex_splitter(std::string_view pattern, SplitBehavior behavior, bool literal,
                            bool invert = false) {
  auto regex = Regex::compile(pattern, literal);
  EXPECT_TRUE(regex.ok()) << regex.status().to_string();
  PreTokenizer pre;
  pre.add_split(std::move(regex).value(), behavior, invert);
  return pre;
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizerTest, QwenPatternByHand) {
  const PreTokenizer pre =
      regex_splitter(testing::kQwenSplitRegex, SplitBehavior::kIsolated, false);
  // "  123": \s+(?!\S) keeps one space (the second is followed by '1'), then \s+ the other;
  // \p{N} takes one digit at a time; "\n\n x": \s*[\r\n]+ takes "\n\n", then " x" is
  // [^\r\n\p{L}\p{N}]?\p{L}+.
  EXPECT_EQ(split(pre, "Hello world's  123\n\n x"),
            (Pieces{"Hello", " world", "'s", " ", " ", "1", "2", "3", "\n\n", " x"}));
  // Case-insensitive contractions; "?!" is ' ?[^\s\p{L}\p{N}]+' with its trailing newline.
  EXPECT_EQ(split(pre, "WE'LL go?!\nok"), (Pieces{"WE", "'LL", " go", "?!\n", "ok"}));
  // Letters of any script; the ideographic space U+3000 is whitespace.
  EXPECT_EQ(split(pre, "日本語\u3000Привет"), (Pieces{"日本語", "\u3000Привет"}));
}

TEST(PreTokenizerTest, Llama3DigitGroupsOfThree) {
  const PreTokenizer pre = regex_splitter(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
      SplitBehavior::kIsolated, false);
  EXPECT_EQ(split(pre, "12345 x"), (Pieces{"123", "45", " x"}));
}

TEST(PreTokenizerTest, BehavioursOnLiteralDashes) {
  // Segments of "a-b--c": a, [-], b, [-], [-], c.
  const std::string text = "a-b--c";
  EXPECT_EQ(split(regex_splitter("-", SplitBehavior::kIsolated, true), text),
            (Pieces{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(split(regex_splitter("-", SplitBehavior::kRemoved, true), text),
            (Pieces{"a", "b", "c"}));
  // A match joins the piece before it unless that piece is itself a match.
  EXPECT_EQ(split(regex_splitter("-", SplitBehavior::kMergedWithPrevious, true), text),
            (Pieces{"a-", "b-", "-", "c"}));
  // Mirror image: a match joins the piece after it unless that piece is a match.
  EXPECT_EQ(split(regex_splitter("-", SplitBehavior::kMergedWithNext, true), text),
            (Pieces{"a", "-b", "-", "-c"}));
  EXPECT_EQ(split(regex_splitter("-", SplitBehavior::kContiguous, true), text),
            (Pieces{"a", "-", "b", "--", "c"}));
  // invert: the non-dashes are the "matches", so Removed keeps the dashes.
  EXPECT_EQ(split(regex_splitter("-", SplitBehavior::kRemoved, true, /*invert=*/true), text),
            (Pieces{"-", "-", "-"}));
}

TEST(PreTokenizerTest, ByteLevelPrefixSpaceAndGpt2Regex) {
  PreTokenizer pre;
  ASSERT_TRUE(pre.add_byte_level(/*add_prefix_space=*/true, /*use_regex=*/true).ok());
  EXPECT_EQ(split(pre, "Hi there"), (Pieces{" Hi", " there"}));
  EXPECT_EQ(split(pre, " x"), (Pieces{" x"}));
}

TEST(PreTokenizerTest, BadPatternIsAnErrorWithTheOffset) {
  const auto regex = Regex::compile("(ab", false);
  ASSERT_FALSE(regex.ok());
  EXPECT_EQ(regex.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(regex.status().message().find("offset 3"), std::string::npos)
      << regex.status().message();
}

TEST(PreTokenizerTest, SpaceEscapeIsUnicodeWhiteSpace) {
  auto space = Regex::compile(R"(\s)", false);
  auto not_space = Regex::compile(R"([^\S])", false);
  ASSERT_TRUE(space.ok() && not_space.ok());
  std::vector<std::pair<std::size_t, std::size_t>> a;
  std::vector<std::pair<std::size_t, std::size_t>> b;
  int num_spaces = 0;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    append_utf8(cp, s);
    a.clear();
    b.clear();
    ASSERT_TRUE(space->find_all(s, a).ok());
    ASSERT_TRUE(not_space->find_all(s, b).ok());
    ASSERT_EQ(a.size(), b.size()) << "U+" << std::hex << static_cast<std::uint32_t>(cp);
    num_spaces += static_cast<int>(a.size());
  }
  // White_Space has 25 code points (PropList.txt): 9-D, 20, 85, A0, 1680, 2000-200A, 2028,
  // 2029, 202F, 205F, 3000; U+180E and U+FEFF are not among them.
  EXPECT_EQ(num_spaces, 25);
  for (const char* not_white : {"\u180E", "\uFEFF", "\u200B"}) {
    a.clear();
    ASSERT_TRUE(space->find_all(not_white, a).ok());
    EXPECT_TRUE(a.empty()) << not_white;
  }
}

}  // namespace
}  // namespace packserve::tokenizer
