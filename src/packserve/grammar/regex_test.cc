// regex_test.cc: the regex dialect (regex.h). Oracles: accept/reject tables worked out by hand
// from the dialect's rules; std::regex_match (ECMAScript) on seeded random strings for ASCII
// patterns in the dialects' common subset; tokenizer::valid_sequence_length for the UTF-8 range
// automata; every error's code and exact message.
#include "packserve/grammar/regex.h"

#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "packserve/grammar/grammar_test_util.h"
#include "packserve/grammar/utf8_ranges.h"
#include "packserve/tokenizer/utf8.h"

namespace packserve::grammar {
namespace {

using testing::byte_vocabulary;
using testing::full_match;

std::shared_ptr<const Grammar> compile(const std::string& pattern) {
  auto g = Grammar::regex(pattern, byte_vocabulary());
  EXPECT_TRUE(g.ok()) << pattern << ": " << g.status().to_string();
  return g.ok() ? *g : nullptr;
}

struct MatchCase {
  std::string pattern;
  std::vector<std::string> accepted;
  std::vector<std::string> rejected;
};

TEST(RegexTest, AcceptRejectTable) {
  const std::string nul(1, '\0');
  const std::vector<MatchCase> cases = {
      {"abc", {"abc"}, {"", "ab", "abcd", "abd"}},
      {"^abc$", {"abc"}, {"ab", "^abc$", "abc$"}},
      {"a|b|", {"a", "b", ""}, {"ab", "c"}},
      {"(a|bc)*d", {"d", "ad", "bcd", "abcad"}, {"", "a", "bd", "bcda"}},
      {"a{3}", {"aaa"}, {"aa", "aaaa"}},
      {"a{2,}", {"aa", "aaaaaaa"}, {"", "a"}},
      {"a{2,4}", {"aa", "aaa", "aaaa"}, {"a", "aaaaa"}},
      {"a{0,0}b", {"b"}, {"ab"}},
      {"a{0}", {""}, {"a"}},
      {"x{,3}", {"x{,3}"}, {"x", "", "xxx"}},  // not a quantifier: literal text
      {"a{", {"a{"}, {"a"}},
      {"a{1", {"a{1"}, {"a"}},
      {"a}", {"a}"}, {"a"}},
      {"]", {"]"}, {""}},
      {"a+?b*?c??", {"a", "aab", "ac", "abbc"}, {"", "b", "acc"}},
      {"(?:ab)+", {"ab", "abab"}, {"", "aba"}},
      {"(?P<x>a)(?<y_2>b)", {"ab"}, {"a", "b"}},
      {"[a-c]+", {"abc", "cab"}, {"d", ""}},
      {"[^a-c]", {"d", "\xC3\xA9", "\n"}, {"a", "", "dd"}},
      {"[]a]", {"]", "a"}, {"[", "]a"}},
      {"[^]a]", {"b"}, {"]", "a"}},
      {"[-a]", {"-", "a"}, {"b"}},
      {"[a-]", {"-", "a"}, {"b"}},
      {"[a-c-e]", {"a", "b", "-", "e"}, {"d"}},
      {"[\\]\\-\\\\]", {"]", "-", "\\"}, {"a"}},
      {"[\\b]", {"\b"}, {"b"}},
      {"[$^]", {"$", "^"}, {""}},
      {"\\d+", {"0", "123"}, {"a", "", "\xD9\xA1"}},  // ASCII \d: not Arabic-Indic one
      {"\\D", {"a", "\xC3\xA9"}, {"1"}},
      {"\\w\\W", {"a!", "_ ", "Z\xC3\xA9"}, {"ab", "\xC3\xA9!"}},
      {"\\s\\S",
       {" a", "\tb",
        "\x0B"
        "c",
        "\f\xC3\xA9"},
       {"  ", "a "}},
      {"[\\d\\s]+", {"1 2\t3"}, {"1a"}},
      {"[^\\d\\s]", {"a"}, {"1", " "}},
      {"\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\\\\\/\\-\\\"\\'\\#\\ ",
       {".*+?()[]{}|^$\\/-\"'# "},
       {""}},
      {"\\n\\r\\t\\f\\v\\0", {"\n\r\t\f\v" + nul}, {""}},
      {"\\x41\\x7a", {"Az"}, {"\\x41\\x7a"}},
      {"\\xe9", {"\xC3\xA9"}, {"\xE9"}},  // U+00E9 as UTF-8, never the raw byte
      {"\\u00e9", {"\xC3\xA9"}, {"e"}},
      {"\\ud83d\\ude00", {"\xF0\x9F\x98\x80"}, {""}},
      {"\\U0001F600", {"\xF0\x9F\x98\x80"}, {""}},
      {"\\\xC3\xA9", {"\xC3\xA9"}, {""}},
      {".", {"a", "\xC3\xA9", "\xF0\x9F\x98\x80", "\r", nul}, {"\n", "", "ab"}},
      {"[\xCE\xB1-\xCF\x89]+",  // [α-ω]+
       {"\xCE\xB1\xCE\xB2\xCF\x89"},
       {"a", "\xCE\xA9"}},  // Ω is outside
      {"[^\xCE\xB1-\xCF\x89]", {"a", "\xCE\xA9", "\xF0\x9F\x98\x80"}, {"\xCE\xB2"}},
      {"[\\u0400-\\U0010FFFF]", {"\xD0\x80", "\xF4\x8F\xBF\xBF", "\xEF\xBF\xBF"}, {"\xD3"}},
      {"\xC3\xA9+", {"\xC3\xA9\xC3\xA9"}, {"e", "\xC3\xA9\xC3"}},
      {"a.c",
       {"abc",
        "a\xF0\x9F\x98\x80"
        "c"},
       {"a\nc", "ac"}},
      {"", {""}, {"a"}},
      {"()", {""}, {"a"}},
      {"(a*)*", {"", "aaa"}, {"b"}},
      {"(a|)+b", {"b", "aab"}, {"a"}},
      {"(|a)(|b)", {"", "a", "b", "ab"}, {"ba"}},
      {"x*", {"", "xxx"}, {"y"}},
      {"((((a))))", {"a"}, {""}},
  };
  for (const MatchCase& c : cases) {
    SCOPED_TRACE("pattern " + c.pattern);
    const auto g = compile(c.pattern);
    ASSERT_NE(g, nullptr);
    for (const std::string& s : c.accepted) EXPECT_TRUE(full_match(*g, s)) << "text " << s;
    for (const std::string& s : c.rejected) EXPECT_FALSE(full_match(*g, s)) << "text " << s;
  }
}

TEST(RegexTest, NeverProducesInvalidUtf8) {
  const std::vector<std::string> invalid = {
      "\xFF",
      "\x80",
      "\xC0\xAF",
      "\xC1\xBF",  // bad lead, overlong
      "\xE0\x80\xAF",
      "\xED\xA0\x80",
      "\xF0\x80\x80\xAF",  // overlong, surrogate
      "\xF4\x90\x80\x80",
      "\xF5\x80\x80\x80",
      "\xC3",  // > U+10FFFF, truncated
  };
  for (const std::string pattern :
       {".*", "[^a]*", "\\D*", "\\W*", "\\S*", "[\\x00-\\U0010FFFF]*"}) {
    SCOPED_TRACE("pattern " + pattern);
    const auto g = compile(pattern);
    ASSERT_NE(g, nullptr);
    for (const std::string& s : invalid) EXPECT_FALSE(full_match(*g, s)) << "text " << s;
    // The first byte of a match: ASCII or a valid lead byte, never a continuation byte.
    auto m = g->matcher();
    const std::set<int32_t> first = testing::allowed_ids(*m, g->vocabulary());
    for (int b = 0x80; b <= 0xC1; ++b) EXPECT_EQ(first.count(b), 0u) << "byte " << b;
    for (int b = 0xF5; b <= 0xFF; ++b) EXPECT_EQ(first.count(b), 0u) << "byte " << b;
    for (int b = 0xC2; b <= 0xF4; ++b) EXPECT_EQ(first.count(b), 1u) << "byte " << b;
  }
}

struct ErrorCase {
  std::string pattern;
  StatusCode code;
  std::string message;
};

TEST(RegexTest, ErrorsNameCodeAndPosition) {
  constexpr auto kInvalid = StatusCode::kInvalidArgument;
  constexpr auto kUnimpl = StatusCode::kUnimplemented;
  const std::vector<ErrorCase> cases = {
      {"(ab", kInvalid, "regex: position 0: unmatched '('"},
      {"a(b(c)", kInvalid, "regex: position 1: unmatched '('"},
      {"ab)", kInvalid, "regex: position 2: unmatched ')'"},
      {"(ab))", kInvalid, "regex: position 4: unmatched ')'"},
      {"[z-a]", kInvalid, "regex: position 1: bad range z-a: lo > hi"},
      {"[\\d-z]", kInvalid, "regex: position 1: bad range \\d-z"},
      {"a{3,2}", kInvalid, "regex: position 1: bad repetition range {3,2}: min > max"},
      {"*a", kInvalid, "regex: position 0: nothing to repeat before '*'"},
      {"(+)", kInvalid, "regex: position 1: nothing to repeat before '+'"},
      {"a|?", kInvalid, "regex: position 2: nothing to repeat before '?'"},
      {"{2}", kInvalid, "regex: position 0: nothing to repeat before '{2}'"},
      {"^*", kInvalid, "regex: position 1: nothing to repeat before '*'"},
      {"a**", kInvalid, "regex: position 2: nothing to repeat: multiple quantifiers"},
      {"a{2}{3}", kInvalid, "regex: position 4: nothing to repeat: multiple quantifiers"},
      {"a*??", kInvalid, "regex: position 3: nothing to repeat: multiple quantifiers"},
      {"ab\\", kInvalid, "regex: position 2: trailing backslash"},
      {"a\xFF", kInvalid, "regex: position 1: invalid UTF-8"},
      {"[a\xC3]", kInvalid, "regex: position 2: invalid UTF-8"},
      {"\xED\xA0\x80", kInvalid, "regex: position 0: invalid UTF-8"},
      {"\\q", kInvalid, "regex: position 0: bad escape \\q"},
      {"a\\x4", kInvalid, "regex: position 1: bad escape \\x4: expected 2 hex digits"},
      {"\\u12g4", kInvalid, "regex: position 0: bad escape \\u12: expected 4 hex digits"},
      {"\\ud800", kInvalid, "regex: position 0: lone high surrogate \\u"},
      {"x\\udc00", kInvalid, "regex: position 1: lone low surrogate \\u"},
      {"\\ud800\\u0041", kInvalid,
       "regex: position 0: high surrogate \\u not followed by a low surrogate"},
      {"\\U00110000", kInvalid, "regex: position 0: \\U escape is not a Unicode scalar value"},
      {"a[bc", kInvalid, "regex: position 1: unterminated character class"},
      {"[]", kInvalid, "regex: position 0: unterminated character class"},
      {"(?P<>a)", kInvalid, "regex: position 0: bad group name"},
      {"(?<a-b>a)", kInvalid, "regex: position 0: bad group name"},
      {"[^\\s\\S]", kInvalid, "regex: the pattern matches no string"},
      {"a{1001}", kInvalid, "regex: too complex: position 1: repetition count over 1000"},
      {"a{2,99999999999}", kInvalid, "regex: too complex: position 1: repetition count over 1000"},
      {"(a{1000}){1000}", kInvalid, "regex: too complex: the NFA has over 200000 states"},
      {"[ab]*a[ab]{16}", kInvalid, "regex: too complex: the DFA has over 50000 states"},
      {"(.{0,100}){0,10}", kInvalid,
       "regex: too complex: the DFA's states hold over 4000000 NFA states in all"},
      {std::string(201, '(') + std::string(201, ')'), kInvalid,
       "regex: too complex: position 200: groups nested deeper than 200"},
      {"(a)\\1", kUnimpl, "regex: position 3: backreference \\1 is not supported"},
      {"(?P<n>a)(?P=n)", kUnimpl, "regex: position 8: backreference (?P= is not supported"},
      {"(?<n>a)\\k<n>", kUnimpl, "regex: position 7: backreference \\k is not supported"},
      {"a(?=b)", kUnimpl, "regex: position 1: lookahead (?= is not supported"},
      {"(?!a)", kUnimpl, "regex: position 0: lookahead (?! is not supported"},
      {"(?<=a)b", kUnimpl, "regex: position 0: lookbehind (?<= is not supported"},
      {"(?<!a)b", kUnimpl, "regex: position 0: lookbehind (?<! is not supported"},
      {"\\bfoo", kUnimpl, "regex: position 0: word boundary \\b is not supported"},
      {"a\\B", kUnimpl, "regex: position 1: word boundary \\B is not supported"},
      {"\\Aa", kUnimpl, "regex: position 0: anchor \\A is not supported"},
      {"(?i)abc", kUnimpl,
       "regex: position 0: group (?i (inline flags, comments, atomic and conditional groups) "
       "is not supported"},
      {"a*+", kUnimpl, "regex: position 2: possessive quantifier *+ is not supported"},
      {"a{2}+", kUnimpl, "regex: position 4: possessive quantifier {2}+ is not supported"},
      {"a^b", kUnimpl,
       "regex: position 1: anchor '^' other than at the start of the pattern is not supported"},
      {"a$b", kUnimpl,
       "regex: position 1: anchor '$' other than at the end of the pattern is not supported"},
      {"(a$)", kUnimpl,
       "regex: position 2: anchor '$' other than at the end of the pattern is not supported"},
      {"\\p{L}", kUnimpl, "regex: position 0: Unicode property \\p is not supported"},
      {"\\012", kUnimpl, "regex: position 0: octal escape is not supported"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE("pattern " + c.pattern);
    const auto g = Grammar::regex(c.pattern, byte_vocabulary());
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), c.code);
    EXPECT_EQ(g.status().message(), c.message);
  }
}

TEST(RegexTest, NullVocabularyIsRejected) {
  const auto g = Grammar::regex("a", nullptr);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g.status().message(), "vocab: must not be null");
}

TEST(RegexTest, RepetitionAtTheLimitsCompiles) {
  const auto g = compile("a{1000}");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(full_match(*g, std::string(1000, 'a')));
  EXPECT_FALSE(full_match(*g, std::string(999, 'a')));
  EXPECT_FALSE(full_match(*g, std::string(1001, 'a')));
  const auto dot = compile(".{0,300}x");
  ASSERT_NE(dot, nullptr);
  EXPECT_FALSE(full_match(*dot, std::string(300, '\xCE') + "x"));  // broken UTF-8
  std::string omegas;
  for (int i = 0; i < 300; ++i) omegas += "\xCF\x89";
  EXPECT_TRUE(full_match(*dot, omegas + "x"));
  EXPECT_FALSE(full_match(*dot, omegas + "ax"));
}

// Patterns in the common subset of this dialect and ECMAScript (no `[]`-first classes, no
// literal `{`, no named groups); strings never contain \r (ECMAScript's `.` excludes it).
TEST(RegexTest, AgreesWithStdRegexOnRandomStrings) {
  const std::vector<std::string> patterns = {
      "a*b",
      "(a|b)*abb",
      "(ab|a)(bc|c)?",
      "[a-c]+d?",
      "[^abc]*",
      "a{2,3}b{0,2}",
      "(a{2}|b{3})+",
      "\\d+(\\.\\d+)?",
      "-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?",
      "\\w+\\s\\w*",
      "[\\w-]+@[a-z]+\\.(com|org)",
      "(a|)+b",
      "x*y*z*",
      "(ab)*|(ba)*",
      "[^\\d\\s]+",
      "\\S\\s?\\S",
      "(a?){3}a{3}",
      "[.-9]+",
      "((a|b)c)*",
      "a|ab|abc",
      ".a.",
      "(?:a|b)*?c",
      "\"([^\"\\\\]|\\\\.)*\"",
      "[ \\t\\n]{0,3}\\{[ ]?\"k\"[ ]?:[ ]?(true|false|null)[ ]?\\}",
      "(a|b){2,5}",
      "a{0,2}(b|c{1,})",
  };
  for (const std::string& pattern : patterns) {
    SCOPED_TRACE("pattern " + pattern);
    const auto g = compile(pattern);
    ASSERT_NE(g, nullptr);
    const std::regex oracle(pattern, std::regex::ECMAScript);
    std::string alphabet = "a0 \n";
    for (const char c : pattern) {
      if (c != '\r' && alphabet.find(c) == std::string::npos) alphabet += c;
    }
    std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(pattern)));
    int num_matches = 0;
    for (int i = 0; i < 400; ++i) {
      // Even i: random text over the pattern's characters. Odd i: a random walk through
      // the bytes our matcher allows (ASCII without \r), then often one random edit, so
      // that about half the texts are matches for std::regex to judge.
      std::string s;
      if (i % 2 == 0) {
        s.resize(rng() % 9);
        for (char& c : s) c = alphabet[rng() % alphabet.size()];
      } else {
        auto m = g->matcher();
        while (s.size() < 60 && !(m->accepting() && rng() % 3 == 0)) {
          std::vector<int32_t> bytes;
          for (const int32_t b : testing::allowed_ids(*m, g->vocabulary())) {
            if (b < 0x80 && b != '\r') bytes.push_back(b);
          }
          if (bytes.empty()) break;
          const int32_t b = bytes[rng() % bytes.size()];
          EXPECT_TRUE(m->accept(b).ok());
          s += static_cast<char>(b);
        }
        if (!s.empty() && rng() % 3 == 0) s[rng() % s.size()] = alphabet[rng() % alphabet.size()];
      }
      const bool expected = std::regex_match(s, oracle);
      EXPECT_EQ(full_match(*g, s), expected) << "text \"" << s << "\"";
      num_matches += expected ? 1 : 0;
    }
    EXPECT_GT(num_matches, 40) << "too few matches: the test would be nearly vacuous";
  }
}

// Every byte string of length 1-4 is matched by a set's sequences iff it is one well-formed
// UTF-8 character whose code point is in the set.
TEST(Utf8RangesTest, SequencesMatchExactlyTheEncodingsOfTheSet) {
  std::mt19937 rng(7);
  const std::vector<CodePointSet> sets = {
      {{0, kMaxCodePoint}},
      {{'a', 'z'}},
      {{0x7F, 0x80}, {0x7FF, 0x800}, {0xFFFF, 0x10000}},
      {{0xD000, 0xE100}},  // spans the surrogates, which normalization removes
      {{0x3B1, 0x3C9}, {0x1F600, 0x1F64F}},
      {{0x10FFFF, 0x10FFFF}},
  };
  for (const CodePointSet& raw : sets) {
    const CodePointSet set = normalize_code_points(raw);
    const std::vector<Utf8Sequence> seqs = utf8_sequences(set);
    auto in_set = [&](char32_t cp) {
      for (const CodePointRange& r : set) {
        if (cp >= r.lo && cp <= r.hi) return true;
      }
      return false;
    };
    auto matched = [&](std::string_view s) {
      for (const Utf8Sequence& q : seqs) {
        if (static_cast<std::size_t>(q.num_ranges) != s.size()) continue;
        bool ok = true;
        for (int i = 0; i < q.num_ranges && ok; ++i) {
          const auto b = static_cast<uint8_t>(s[static_cast<std::size_t>(i)]);
          ok = b >= q.ranges[i].lo && b <= q.ranges[i].hi;
        }
        if (ok) return true;
      }
      return false;
    };
    for (char32_t cp = 0; cp <= kMaxCodePoint; cp += static_cast<char32_t>(1 + rng() % 7)) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      std::string s;
      tokenizer::append_utf8(cp, s);
      ASSERT_EQ(matched(s), in_set(cp)) << "code point " << static_cast<uint32_t>(cp);
    }
    for (int i = 0; i < 200000; ++i) {
      std::string s(1 + rng() % 4, ' ');
      for (char& c : s) c = static_cast<char>(rng() % 3 == 0 ? rng() % 256 : 0x80 + rng() % 64);
      char32_t cp = 0;
      const bool valid = tokenizer::valid_sequence_length(s, &cp) == s.size();
      ASSERT_EQ(matched(s), valid && in_set(cp)) << "bytes of length " << s.size();
    }
  }
}

TEST(Utf8RangesTest, ComplementCoversEveryOtherScalarValue) {
  const CodePointSet set = complement_code_points(normalize_code_points({{'\n', '\n'}}));
  ASSERT_EQ(set.size(), 3u);
  EXPECT_EQ(set[0].lo, 0u);
  EXPECT_EQ(set[0].hi, 9u);
  EXPECT_EQ(set[1].lo, 11u);
  EXPECT_EQ(set[1].hi, 0xD7FFu);
  EXPECT_EQ(set[2].lo, 0xE000u);
  EXPECT_EQ(set[2].hi, kMaxCodePoint);
  EXPECT_TRUE(complement_code_points({{0, 0xD7FF}, {0xE000, kMaxCodePoint}}).empty());
}

}  // namespace
}  // namespace packserve::grammar
