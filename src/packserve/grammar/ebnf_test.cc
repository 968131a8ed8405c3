// ebnf_test.cc: ebnf_to_regex and Grammar::ebnf. Oracles: exact regexes of small grammars
// worked out from ebnf.h's rules; documents run through the compiled grammar on the byte
// vocabulary (full_match), including a JSON and an arithmetic grammar with their nesting
// bound; every error path with its code and exact message.
#include "packserve/grammar/ebnf.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "packserve/grammar/grammar.h"
#include "packserve/grammar/grammar_test_util.h"

namespace packserve::grammar {
namespace {

using testing::byte_vocabulary;
using testing::full_match;

std::string regex_of(const std::string& grammar) {
  Result<std::string> r = ebnf_to_regex(grammar);
  EXPECT_TRUE(r.ok()) << grammar << "\n" << r.status().to_string();
  return r.ok() ? *r : std::string();
}

std::shared_ptr<const Grammar> compile(const std::string& grammar) {
  Result<std::shared_ptr<const Grammar>> g = Grammar::ebnf(grammar, byte_vocabulary());
  EXPECT_TRUE(g.ok()) << grammar << "\n" << g.status().to_string();
  return g.ok() ? *g : nullptr;
}

// Every document of `valid` is a complete match, none of `invalid` is.
void expect_documents(const std::string& grammar, const std::vector<std::string>& valid,
                      const std::vector<std::string>& invalid) {
  SCOPED_TRACE(grammar);
  const auto g = compile(grammar);
  ASSERT_NE(g, nullptr);
  for (const std::string& doc : valid) EXPECT_TRUE(full_match(*g, doc)) << "rejected: " << doc;
  for (const std::string& doc : invalid) EXPECT_FALSE(full_match(*g, doc)) << "accepted: " << doc;
}

TEST(EbnfTest, ExactRegexes) {
  EXPECT_EQ(regex_of(R"(root ::= "a.b" [x-z0] "\n" | "(" )"), R"g((?:a\.b[x-z0]\n|\())g");
  EXPECT_EQ(regex_of(R"(root ::= [^"\\] . "\x01\u00e9")"),
            "[^\\U00000022\\U0000005C](?:.|\\n)\\x01\u00e9");
  EXPECT_EQ(regex_of(R"(root ::= "a"* "b"+ "c"? "d"{2} "e"{2,} "f"{1,3} "g"{,2})"),
            "(?:a)*(?:b)+(?:c)?(?:d){2}(?:e){2,}(?:f){1,3}(?:g){0,2}");
  // Rules inline; an empty alternative is the empty string; a rule used twice appears twice.
  EXPECT_EQ(regex_of("root ::= x \"-\" x\nx ::= | \"1\" | \"2\""), "(?:|1|2)-(?:|1|2)");
}

TEST(EbnfTest, LayoutRulesSpanLinesAndCommentsAreSpace) {
  // A rule ends where the next `name ::=` starts: `|` may end a line or start the next.
  const std::string grammar =
      "# a comment\n"
      "root ::= greeting \" \" name  # trailing comment\n"
      "greeting ::= \"hi\" |\n"
      "  \"hello\"\n"
      "  | \"hey\"\n"
      "name ::= [A-Z] [a-z]*\n";
  expect_documents(grammar, {"hi Ann", "hello Bo", "hey X"}, {"hi", "hi ann", "yo Ann", "hey  X"});
  // Groups may hold newlines; whitespace before a quantifier is allowed.
  expect_documents("root ::= (\n  \"a\" |\n  \"b\"\n) +", {"a", "abba"}, {"", "c"});
}

TEST(EbnfTest, UnicodeLiteralsAndClasses) {
  expect_documents(R"(root ::= "é" [α-ω]+ "\u2603" [^a])",
                   {"\u00e9\u03b1\u03c9\u2603b", "\u00e9\u03b2\u2603\u00e9"},
                   {"\u00e9\u2603b", "\u00e9\u03b1\u2603a", "e\u03b1\u2603b"});
  // [^...] matches any code point outside it, never invalid UTF-8.
  expect_documents(R"(root ::= [^x]{2})", {"ab", "\u4e2d\u6587"}, {"xa", "a", "\xff\xfe"});
}

// A JSON grammar of our own in GBNF: objects and arrays nest kMaxEbnfNesting deep.
TEST(EbnfTest, JsonGrammarNestsToTheBound) {
  const std::string json_gbnf = R"g(
root    ::= obj
obj     ::= "{" sp (member ("," sp member)*)? "}" sp
member  ::= str ":" sp val
arr     ::= "[" sp (val ("," sp val)*)? "]" sp
val     ::= obj | arr | str | num | ("true" | "false" | "null") sp
str     ::= "\"" (plain | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))* "\"" sp
plain   ::= [^"\\\x00-\x1F]   # any character but a quote, a backslash or a control
num     ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [+-]? [0-9]+)? sp
sp      ::= [ \t\n]{0,8}
)g";
  static_assert(kMaxEbnfNesting == 3, "the documents below nest to 3");
  const std::vector<std::string> valid = {"{}", R"({"a": 1, "b": [true, null, "x\n\u00e9"]})",
                                          R"({"a":{"b":{"c":[]}}})", "{\"k\": -1.5e3 }\n",
                                          R"({"a": [[1]]})"};
  for (const std::string& doc : valid) EXPECT_TRUE(nlohmann::json::accept(doc)) << doc;
  expect_documents(json_gbnf, valid,
                   {"[]", R"({"a":{"b":{"c":{}}}})", R"({"a": [[[1]]]})", R"({"a" 1})",
                    R"({"a": 01})", "{\"a\": \"\x01\"}"});
}

// Arithmetic equations: `factor` recurses through `sum`.
TEST(EbnfTest, ArithmeticGrammar) {
  const std::string arithmetic = R"g(
root   ::= (sum "=" sp factor "\n")+
sum    ::= factor ([-+*/] factor)*
factor ::= var | int | "(" sp sum ")" sp
var    ::= [a-z] [a-z0-9_]* sp
int    ::= [0-9]+ sp
sp     ::= [ \t]*
)g";
  expect_documents(arithmetic, {"1+2=3\n", "(a*(b-c))=x\n", "x = y\nz=1\n"},
                   {"1+2=3", "((((1))))=1\n", "1+=3\n", "=3\n"});
}

TEST(EbnfTest, RecursionIsUnrolledToTheBound) {
  // root is open once at the top, so two more levels fit.
  expect_documents(R"g(root ::= "(" root ")" | "x")g", {"x", "(x)", "((x))"}, {"(((x)))", "()"});
  // Left recursion unrolls the same way.
  expect_documents(R"(root ::= root "a" | "b")", {"b", "ba", "baa"}, {"baaa", "a"});
}

struct ErrorCase {
  std::string grammar;
  StatusCode code;
  std::string message;
};

TEST(EbnfTest, EveryErrorPathHasItsCodeAndMessage) {
  constexpr StatusCode kBad = StatusCode::kInvalidArgument;
  const ErrorCase cases[] = {
      {"", kBad, "grammar: no rule named root"},
      {R"(start ::= "a")", kBad, "grammar: no rule named root"},
      {R"(root := "a")", kBad, "grammar: line 1 column 6: expected ::= after \"root\""},
      {R"(::= "a")", kBad, "grammar: line 1 column 1: expected a rule name"},
      {"root ::= \"a\"\nroot ::= \"b\"", kBad,
       "grammar: line 2 column 1: rule \"root\" is defined twice"},
      {"root ::= \"a\" item", kBad, "grammar: line 1 column 14: rule \"item\" is not defined"},
      {R"(root ::= "abc)", kBad, "grammar: line 1 column 14: unterminated literal"},
      {R"(root ::= [a-z)", kBad, "grammar: line 1 column 10: unterminated character class"},
      {R"(root ::= [])", kBad, "grammar: line 1 column 10: empty character class"},
      {R"(root ::= [z-a])", kBad, "grammar: line 1 column 14: reversed range in a character class"},
      {R"(root ::= "\q")", kBad, "grammar: line 1 column 11: unknown escape \\q"},
      {R"(root ::= "\x4")", kBad, "grammar: line 1 column 11: \\x needs 2 hex digits"},
      {R"(root ::= "\uD800")", kBad,
       "grammar: line 1 column 11: \\uD800: not a Unicode scalar value"},
      {"root ::= \"\xff\"", kBad, "grammar: line 1 column 11: invalid UTF-8"},
      {R"g(root ::= ("a")g", kBad, "grammar: line 1 column 14: expected ')'"},
      {R"g(root ::= "a" ))g", kBad, "grammar: line 1 column 14: unmatched ')'"},
      {R"(root ::= "a"{3,2})", kBad,
       "grammar: line 1 column 13: repetition {3,2}: the maximum is below the minimum"},
      {R"(root ::= "a"{1001})", kBad, "grammar: line 1 column 13: repetition count over 1000"},
      {R"(root ::= "a"{x})", kBad, "grammar: line 1 column 14: expected a count in {...}"},
      {R"(root ::= "a"{2)", kBad,
       "grammar: line 1 column 15: expected } closing the repetition count"},
      {R"(root ::= "a" @)", kBad,
       "grammar: line 1 column 14: expected a literal, a character class, '.', a rule name or "
       "'(', got '@'"},
      {R"g(root ::= "a" (= "b"))g", StatusCode::kUnimplemented,
       "grammar: line 1 column 15: lookahead assertions (= ...) are not supported"},
      {R"(root ::= "a" root)", kBad,
       "grammar: root matches nothing (every alternative nests a rule more than 3 deep)"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.grammar);
    Result<std::string> r = ebnf_to_regex(c.grammar);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code);
    EXPECT_EQ(r.status().message(), c.message);
  }
  // Too large: a rule doubling per level, 20 levels deep.
  std::string doubling = "root ::= r0\n";
  for (int i = 0; i < 20; ++i) {
    doubling += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " \"-\" r" +
                std::to_string(i + 1) + "\n";
  }
  doubling += "r20 ::= \"abcdefgh\"\n";
  Result<std::string> big = ebnf_to_regex(doubling);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().message(),
            "grammar: too complex: the expansion exceeds 1048576 bytes of regex (recursion is "
            "unrolled 3 deep)");
  // The regex compiler's caps name the grammar (the DFA of "an 'a' 20 from the end" has 2^20
  // states).
  Result<std::shared_ptr<const Grammar>> wide =
      Grammar::ebnf(R"(root ::= [ab]* "a" [ab]{20})", byte_vocabulary());
  ASSERT_FALSE(wide.ok());
  EXPECT_TRUE(
      wide.status().message().starts_with("grammar: the grammar's matcher does not "
                                          "compile: regex: too complex"))
      << wide.status().message();
}

TEST(EbnfTest, MasksFollowTheGrammar) {
  const auto g = compile(R"g(root ::= ("yes" | "no") "!")g");
  ASSERT_NE(g, nullptr);
  auto m = g->matcher();
  const auto& vocab = g->vocabulary();
  EXPECT_EQ(testing::allowed_ids(*m, vocab), (std::set<int32_t>{'n', 'y'}));
  ASSERT_TRUE(m->accept('n').ok());
  ASSERT_TRUE(m->accept('o').ok());
  EXPECT_EQ(testing::allowed_ids(*m, vocab), (std::set<int32_t>{'!'}));
  ASSERT_TRUE(m->accept('!').ok());
  EXPECT_EQ(testing::allowed_ids(*m, vocab), (std::set<int32_t>{testing::kByteEos}));
  EXPECT_TRUE(m->finished());
}

}  // namespace
}  // namespace packserve::grammar
