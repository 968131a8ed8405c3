// grammar_test.cc: masks, matchers and the mask cache (grammar.h). Oracles: allowed sets on a
// small hand-made vocabulary worked out by hand; on random vocabularies and random walks, the
// brute-force mask (accept() each token on a fresh matcher) and the cached mask vs the one
// first computed; for choice, the strings themselves.
#include "packserve/grammar/grammar.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "packserve/grammar/grammar_test_util.h"
#include "packserve/grammar/mask_cache.h"
#include "packserve/grammar/synthetic_vocabulary.h"

namespace packserve::grammar {
namespace {

using testing::allowed_ids;
using testing::brute_force_ids;
using testing::byte_vocabulary;
using testing::feed_bytes;
using testing::full_match;
using Ids = std::set<int32_t>;

// The hand-made vocabulary of the exact-mask tests.
constexpr int32_t kEos = 16;
std::shared_ptr<const Vocabulary> hand_vocabulary() {
  std::vector<std::string> tokens = {
      "{",         // 0
      "\"",        // 1
      "\"a",       // 2
      "a\"",       // 3
      "}",         // 4
      "{\"",       // 5
      " ",         // 6
      "12",        // 7
      "1.",        // 8
      "\\u",       // 9
      "a",         // 10
      ":",         // 11
      "\xC3",      // 12: first byte of U+00E9
      "\xA9",      // 13: its second byte
      "\xC3\xA9",  // 14: U+00E9 whole
      "\xA9\"",    // 15: its second byte, then a quote
      "",          // 16: EOS
      "",          // 17: a special token: never allowed
      "}\n",       // 18
      "1",         // 19
      "0",         // 20
      ",",         // 21
      "e",         // 22
      "\"a\"",     // 23
  };
  return std::make_shared<const Vocabulary>(std::move(tokens), std::vector<int32_t>{kEos});
}

std::shared_ptr<const Grammar> ok_or_null(Result<std::shared_ptr<const Grammar>> g) {
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? *g : nullptr;
}

void expect_accept(Matcher& m, int32_t token) {
  const Status s = m.accept(token);
  EXPECT_TRUE(s.ok()) << "token " << token << ": " << s.to_string();
}

TEST(VocabularyTest, SizesAndEos) {
  const auto vocab = hand_vocabulary();
  EXPECT_EQ(vocab->size(), 24);
  EXPECT_EQ(vocab->mask_words(), 1);
  EXPECT_EQ(vocab->bytes(2), "\"a");
  EXPECT_TRUE(vocab->is_eos(kEos));
  EXPECT_FALSE(vocab->is_eos(17));
  EXPECT_FALSE(vocab->is_eos(-1));
  EXPECT_FALSE(vocab->is_eos(24));
  EXPECT_EQ(byte_vocabulary()->mask_words(), 9);  // 258 ids
}

TEST(MaskTest, RegexStringMasksStepByStep) {
  const auto vocab = hand_vocabulary();
  const auto g = ok_or_null(Grammar::regex("\"(a|\\u00e9)*\"", vocab));
  ASSERT_NE(g, nullptr);
  auto m = g->matcher();
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{1, 2, 23}));
  EXPECT_FALSE(m->accepting());
  EXPECT_FALSE(m->finished());

  // A disallowed token fails with the documented message and changes nothing.
  Status s = m->accept(4);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "token 4 (\"}\") is not allowed here");
  s = m->accept(kEos);
  EXPECT_EQ(s.message(), "token 16 (\"\") is not allowed here: the output is not a complete match");
  s = m->accept(17);
  EXPECT_EQ(s.message(),
            "token 17 (\"\") is not allowed here: a token without bytes is never allowed");
  s = m->accept(24);
  EXPECT_EQ(s.message(), "token 24 is outside the vocabulary [0, 24)");
  s = m->accept(-1);
  EXPECT_EQ(s.message(), "token -1 is outside the vocabulary [0, 24)");
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{1, 2, 23}));

  expect_accept(*m, 2);  // "a
  // `"a"` is refused: after its closing quote, `a` has nowhere to go.
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{1, 3, 10, 12, 14}));
  expect_accept(*m, 12);  // first byte of U+00E9: only its second byte may follow
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{13, 15}));
  s = m->accept(3);
  EXPECT_EQ(s.message(), "token 3 (\"a\\\"\") is not allowed here");
  EXPECT_FALSE(m->accepting());
  expect_accept(*m, 15);  // \xA9"
  EXPECT_TRUE(m->accepting());
  EXPECT_TRUE(m->finished());  // a complete match no byte extends
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{kEos}));
  expect_accept(*m, kEos);
  EXPECT_TRUE(m->finished());
  EXPECT_EQ(allowed_ids(*m, *vocab), Ids{});
  s = m->accept(kEos);
  EXPECT_EQ(s.message(), "token 16 (\"\") is not allowed here: the output has ended");
}

TEST(MaskTest, EosOnlyWhenAccepting) {
  const auto vocab = hand_vocabulary();
  const auto g = ok_or_null(Grammar::regex("a*", vocab));
  ASSERT_NE(g, nullptr);
  auto m = g->matcher();
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{10, kEos}));
  EXPECT_TRUE(m->accepting());
  EXPECT_FALSE(m->finished());  // more a's may follow
  expect_accept(*m, 10);
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{10, kEos}));
  expect_accept(*m, kEos);
  EXPECT_TRUE(m->finished());

  const auto g2 = ok_or_null(Grammar::regex("a+", vocab));
  auto m2 = g2->matcher();
  EXPECT_EQ(allowed_ids(*m2, *vocab), (Ids{10}));
}

TEST(MaskTest, JsonObjectMasksStepByStep) {
  const auto vocab = hand_vocabulary();
  const auto g = ok_or_null(Grammar::json_object(vocab));
  ASSERT_NE(g, nullptr);
  auto m = g->matcher();
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{0, 5, 6}));
  expect_accept(*m, 5);  // {"  : inside a key
  // Any content token; `"` closes the key (then only `:` or whitespace); not `"a` or
  // `"a"` (a after the key), not a lone continuation byte, not a raw newline.
  EXPECT_EQ(allowed_ids(*m, *vocab),
            (Ids{0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 19, 20, 21, 22}));
  expect_accept(*m, 3);  // a"
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{6, 11}));
  expect_accept(*m, 11);  // :
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{0, 1, 2, 5, 6, 7, 8, 19, 20, 23}));
  expect_accept(*m, 7);  // 12: a number continues or ends at a structural byte
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{4, 6, 7, 8, 19, 20, 21, 22}));
  EXPECT_FALSE(m->accepting());
  EXPECT_EQ(m->accept(18).message(), "token 18 (\"}\\x0a\") is not allowed here");
  expect_accept(*m, 4);  // }
  EXPECT_TRUE(m->accepting());
  EXPECT_TRUE(m->finished());
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{kEos}));
}

TEST(MaskTest, JsonObjectEscapeAndSplitCharacter) {
  const auto vocab = hand_vocabulary();
  const auto g = ok_or_null(Grammar::json_object(vocab));
  auto m = g->matcher();
  for (const int32_t t : {5, 3, 11, 1}) expect_accept(*m, t);    // {"a":"
  expect_accept(*m, 9);                                          // \u
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{7, 10, 19, 20, 22}));  // hex digits only
  expect_accept(*m, 7);                                          // \u12
  expect_accept(*m, 22);                                         // \u12e
  // One more hex digit, then string content or the closing quote.
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{3, 7, 8, 10, 19, 20, 22}));
  expect_accept(*m, 20);  // \u12e0
  expect_accept(*m, 12);  // half of U+00E9
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{13, 15}));
}

// allowed_token_ids: the listed tokens alone (EOS and special tokens when listed), or within
// an inner grammar's mask; a token outside them is refused and changes nothing.
TEST(RestrictTokensTest, AloneAndWithinAGrammar) {
  const auto vocab = testing::byte_vocabulary();
  const std::vector<int32_t> allowed = {'a', 'b', 'x', testing::kByteSpecial};
  auto alone = Grammar::restrict_tokens(nullptr, vocab, allowed);
  ASSERT_TRUE(alone.ok()) << alone.status().to_string();
  auto m = (*alone)->matcher();
  EXPECT_EQ(testing::allowed_ids(*m, *vocab), (Ids{'a', 'b', 'x', testing::kByteSpecial}));
  EXPECT_TRUE(m->accepting());
  EXPECT_FALSE(m->finished());
  EXPECT_EQ(m->accept('c').message(), "token 99 is not in allowed_token_ids");
  EXPECT_EQ(m->accept(testing::kByteEos).message(), "token 256 is not in allowed_token_ids");
  EXPECT_TRUE(m->accept('x').ok());
  EXPECT_TRUE(m->accept(testing::kByteSpecial).ok());
  EXPECT_TRUE(m->accepting());

  const auto inner = ok_or_null(Grammar::regex("a+c?", vocab));
  ASSERT_NE(inner, nullptr);
  auto within = Grammar::restrict_tokens(inner, vocab,
                                         std::vector<int32_t>{'a', 'c', 'x', testing::kByteEos});
  ASSERT_TRUE(within.ok()) << within.status().to_string();
  auto w = (*within)->matcher();
  EXPECT_EQ(testing::allowed_ids(*w, *vocab), (Ids{'a'}));  // 'x' is not in the grammar
  EXPECT_FALSE(w->accepting());
  EXPECT_TRUE(w->accept('a').ok());
  EXPECT_EQ(testing::allowed_ids(*w, *vocab), (Ids{'a', 'c', testing::kByteEos}));
  EXPECT_EQ(w->accept('x').message(), "token 120 (\"x\") is not allowed here");
  EXPECT_TRUE(w->accept('c').ok());
  EXPECT_TRUE(w->finished());

  EXPECT_EQ(Grammar::restrict_tokens(nullptr, vocab, std::vector<int32_t>{}).status().message(),
            "allowed_token_ids: expected at least one id");
  EXPECT_EQ(
      Grammar::restrict_tokens(nullptr, vocab, std::vector<int32_t>{1, 258}).status().message(),
      "allowed_token_ids[1]: expected a token id in [0, 258), got 258");
}

// bad_words: the last token of a sequence is banned exactly where the output ends with the
// rest of it; one-token sequences everywhere; within an inner grammar's mask too.
TEST(BanSequencesTest, LastTokenBannedAfterItsPrefix) {
  const auto vocab = testing::byte_vocabulary();
  const std::vector<std::vector<int32_t>> banned = {{'a', 'b', 'c'}, {'z'}, {'b', 'b'}};
  auto g = Grammar::ban_sequences(nullptr, vocab, banned);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto m = (*g)->matcher();
  // Every token of the vocabulary but 'z' (EOS and the special token included, as without a
  // constraint), and no bit past its end.
  Ids all_but_z;
  for (int32_t t = 0; t < vocab->size(); ++t) {
    if (t != 'z') all_but_z.insert(t);
  }
  EXPECT_EQ(testing::allowed_ids(*m, *vocab), all_but_z);
  EXPECT_TRUE(m->accepting());
  EXPECT_FALSE(m->finished());
  EXPECT_EQ(m->accept('z').message(), "token 122 would complete a sequence of bad_words_token_ids");
  ASSERT_TRUE(m->accept('a').ok());
  EXPECT_EQ(testing::allowed_ids(*m, *vocab), all_but_z);  // "a" alone completes nothing
  ASSERT_TRUE(m->accept('b').ok());
  Ids after_ab = all_but_z;
  after_ab.erase('c');  // "ab" + "c"
  after_ab.erase('b');  // "b" + "b"
  EXPECT_EQ(testing::allowed_ids(*m, *vocab), after_ab);
  EXPECT_FALSE(m->accept('c').ok());
  EXPECT_FALSE(m->accept('b').ok());
  ASSERT_TRUE(m->accept('a').ok());  // refusals changed nothing: "aba"
  ASSERT_TRUE(m->accept('b').ok());
  EXPECT_FALSE(m->accept('c').ok());
  ASSERT_TRUE(m->accept('x').ok());
  EXPECT_TRUE(m->accept('c').ok());  // "...bxc": the prefix is no longer at the end

  // Within a grammar: its mask less the banned tokens; its refusals keep the history as it was.
  const auto inner = ok_or_null(Grammar::regex("[abc]+", vocab));
  ASSERT_NE(inner, nullptr);
  auto within = Grammar::ban_sequences(inner, vocab, banned);
  ASSERT_TRUE(within.ok()) << within.status().to_string();
  auto w = (*within)->matcher();
  EXPECT_EQ(testing::allowed_ids(*w, *vocab), (Ids{'a', 'b', 'c'}));
  ASSERT_TRUE(w->accept('a').ok());
  EXPECT_EQ(w->accept('x').message(), "token 120 (\"x\") is not allowed here");
  ASSERT_TRUE(w->accept('b').ok());
  EXPECT_EQ(testing::allowed_ids(*w, *vocab), (Ids{'a', testing::kByteEos}));
  EXPECT_TRUE(w->accepting());

  EXPECT_EQ(Grammar::ban_sequences(nullptr, vocab, {}).status().message(),
            "bad_words_token_ids: expected at least one sequence");
  const std::vector<std::vector<int32_t>> empty_one = {{'a'}, {}};
  EXPECT_EQ(Grammar::ban_sequences(nullptr, vocab, empty_one).status().message(),
            "bad_words_token_ids[1]: expected at least one token id");
  const std::vector<std::vector<int32_t>> outside = {{'a', 258}};
  EXPECT_EQ(Grammar::ban_sequences(nullptr, vocab, outside).status().message(),
            "bad_words_token_ids[0][1]: expected a token id in [0, 258), got 258");
}

// structural_tag: free text until a trigger, then one of the structures that begin with it
// (its begin, JSON of its schema, its end), then free text again.
TEST(StructuralTagTest, FreeTextAndTriggeredStructures) {
  const auto vocab = testing::byte_vocabulary();
  const std::string tag =
      R"({"type":"structural_tag","structures":[)"
      R"({"begin":"<f=a>","schema":{"type":"object","properties":{"x":{"type":"integer"}},)"
      R"("required":["x"]},"end":"</f>"},{"begin":"<f=b>","schema":{},"end":"</f>"}],)"
      R"("triggers":["<f="]})";
  const auto g = ok_or_null(Grammar::structural_tag(tag, vocab));
  ASSERT_NE(g, nullptr);
  for (const std::string text :
       {"", "hello", "<f", "a <f", "hi <f=a>{\"x\": 1}</f> bye", "<f=b>[[[[1]]]]</f>",
        "a<<f=b>null</f><f=a>{\"x\":-2}</f>", "<f=b>\"</f>\"</f>", "</f> {\"x\": 1}"}) {
    EXPECT_TRUE(testing::full_match(*g, text)) << text;
  }
  for (const std::string text : {"<f=c>", "hi <f=a>{\"x\": \"s\"}</f>", "<f=a>{\"x\":1}",
                                 "<f=a>{\"x\":1}</g>", "<f=b>[1,]</f>", "<f=b>1 2</f>"}) {
    EXPECT_FALSE(testing::full_match(*g, text)) << text;
  }
  // Masks: free text allows every token with bytes and EOS; after the trigger only the
  // begins' next bytes; inside a structure, no EOS.
  auto m = g->matcher();
  Ids free_text;
  for (int32_t t = 0; t <= testing::kByteEos; ++t) free_text.insert(t);
  EXPECT_EQ(testing::allowed_ids(*m, *vocab), free_text);
  ASSERT_EQ(testing::feed_bytes(*m, "ok <f="), 6u);
  EXPECT_EQ(testing::allowed_ids(*m, *vocab), (Ids{'a', 'b'}));
  EXPECT_FALSE(m->accepting());
  ASSERT_EQ(testing::feed_bytes(*m, "a>{\"x\":"), 7u);
  EXPECT_EQ(testing::allowed_ids(*m, *vocab),
            (Ids{' ', '\t', '\n', '\r', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'}));
  ASSERT_EQ(testing::feed_bytes(*m, "7}</f>"), 6u);
  EXPECT_TRUE(m->accepting());
  EXPECT_FALSE(m->finished());
  EXPECT_EQ(testing::allowed_ids(*m, *vocab), free_text);

  // stop_after_first: the output ends with the first structure.
  std::string first_only = tag;
  first_only.insert(1, R"("stop_after_first":true,)");
  const auto once = ok_or_null(Grammar::structural_tag(first_only, vocab));
  ASSERT_NE(once, nullptr);
  EXPECT_TRUE(testing::full_match(*once, "ok <f=b>1</f>"));
  EXPECT_TRUE(testing::full_match(*once, "no call"));
  EXPECT_FALSE(testing::full_match(*once, "ok <f=b>1</f> and more"));
  auto o = once->matcher();
  ASSERT_EQ(testing::feed_bytes(*o, "<f=b>[]</f"), 10u);
  EXPECT_FALSE(o->finished());
  ASSERT_EQ(testing::feed_bytes(*o, ">"), 1u);
  EXPECT_TRUE(o->finished());
  EXPECT_TRUE(o->accepting());

  const auto error = [&](const std::string& text) {
    return Grammar::structural_tag(text, vocab).status().message();
  };
  EXPECT_EQ(error(R"({"structures":[{"begin":"<a>","schema":{},"end":">"},)"
                  R"({"begin":"x<a!","schema":{},"end":">"}],"triggers":["x<a","<a"]})"),
            "structural_tag: triggers[0]: holds triggers[1] after its start: that one would "
            "always open first");
  EXPECT_EQ(error(R"({"structures":[{"begin":"<a>","schema":{},"end":">"}],"triggers":["<","<"]})"),
            "structural_tag: triggers[1]: repeats triggers[0]");
  // A trigger that starts another is fine: the shorter opens, and the longer one's begins
  // start with it too.
  const auto nested = ok_or_null(Grammar::structural_tag(
      R"({"structures":[{"begin":"<a>","schema":{"type":"null"},"end":"</a>"},)"
      R"({"begin":"<ab>","schema":{"type":"boolean"},"end":"</ab>"}],"triggers":["<a","<ab"]})",
      vocab));
  ASSERT_NE(nested, nullptr);
  EXPECT_TRUE(testing::full_match(*nested, "1 <a>null</a> 2 <ab>true</ab> 3"));
  EXPECT_FALSE(testing::full_match(*nested, "<ab>null</ab>"));
  // xgrammar's format form: triggered_tags of json_schema content, at_least_one opening the
  // output with a tag.
  const std::string format =
      R"({"type":"structural_tag","format":{"type":"triggered_tags","triggers":["<f="],"tags":[)"
      R"({"begin":"<f=a>","content":{"type":"json_schema","json_schema":{"type":"integer"}},)"
      R"("end":"</f>"},{"type":"tag","begin":"<f=b>","content":{"type":"json_schema",)"
      R"("json_schema":true},"end":"</f>"}],"at_least_one":true,"stop_after_first":false}})";
  const auto formatted = ok_or_null(Grammar::structural_tag(format, vocab));
  ASSERT_NE(formatted, nullptr);
  EXPECT_TRUE(testing::full_match(*formatted, "<f=a>12</f> then <f=b>{}</f> end"));
  EXPECT_FALSE(testing::full_match(*formatted, "text first <f=a>12</f>"));
  EXPECT_FALSE(testing::full_match(*formatted, ""));
  EXPECT_FALSE(testing::full_match(*formatted, "<f=a>\"x\"</f>"));
  auto fm = formatted->matcher();
  EXPECT_EQ(testing::allowed_ids(*fm, *vocab), (Ids{'<'}));
  EXPECT_EQ(error(R"({"format":{"type":"triggered_tags","triggers":["<"],"tags":[{"begin":"<a",)"
                  R"("content":{"type":"any_text"},"end":">"}]}})"),
            "structural_tag: format.tags[0].content: only {\"type\": \"json_schema\"} content is "
            "supported");
  EXPECT_EQ(error(R"({"format":{"type":"sequence","elements":[]}})"),
            "structural_tag: format: only {\"type\": \"triggered_tags\"} is supported");
  EXPECT_EQ(
      error(R"({"format":{"type":"triggered_tags","triggers":["<"],"tags":[{"begin":"<a",)"
            R"("content":{"type":"json_schema","json_schema":{"type":"x"}},"end":">"}]}})")
          .rfind("structural_tag: format.tags[0].content.json_schema: json_schema: /type:", 0),
      0u);
  EXPECT_EQ(error(R"({"format":{"type":"triggered_tags","triggers":["!"],"tags":[{"begin":"<a",)"
                  R"("content":{"type":"json_schema","json_schema":{}},"end":">"}]}})"),
            "structural_tag: format.tags[0].begin: expected to start with one of the triggers");
  EXPECT_EQ(error(R"({"format":{"type":"triggered_tags"},"structures":[]})"),
            "structural_tag: structures: not expected beside format (type, format)");
  EXPECT_EQ(error(R"({"stop_after_first":1})"),
            "structural_tag: stop_after_first: expected true or false");
  EXPECT_EQ(error("[]"),
            "structural_tag: expected a JSON object with structures and triggers, or a format");
  EXPECT_EQ(error(R"({"structures":[],"triggers":["<"]})"),
            "structural_tag: structures: expected a list of 1 to 64 {begin, schema, end} objects");
  EXPECT_EQ(error(R"({"structures":[{"begin":"<a>","schema":{}}],"triggers":["<"]})"),
            "structural_tag: structures[0].end: required");
  EXPECT_EQ(error(R"({"structures":[{"begin":"<a>","schema":{},"end":""}],"triggers":["<"]})"),
            "structural_tag: structures[0].end: expected a non-empty string of at most 256 bytes "
            "without U+0001");
  EXPECT_EQ(
      error(R"({"structures":[{"begin":"<a>","schema":{},"end":">"}],"triggers":["<\u0001"]})"),
      "structural_tag: triggers[0]: expected a non-empty string of at most 256 bytes "
      "without U+0001");
  EXPECT_EQ(error(R"({"structures":[{"begin":"<a>","schema":{},"end":">"}],"triggers":["{"]})"),
            "structural_tag: structures[0].begin: expected to start with one of the triggers");
  EXPECT_EQ(error(R"({"structures":[{"begin":"<a>","schema":{},"end":">"}],"triggers":["<","!"]})"),
            "structural_tag: triggers[1]: starts no structure's begin");
  EXPECT_EQ(
      error(R"({"structures":[{"begin":"<a>","schema":{},"end":">"}],"triggers":["<"],"x":1})"),
      "structural_tag: x: not expected (type, structures, triggers, stop_after_first)");
  EXPECT_EQ(
      error(
          R"({"structures":[{"begin":"<a>","schema":{"type":"nope"},"end":">"}],"triggers":["<"]})")
          .rfind("structural_tag: structures[0].schema: json_schema: /type: expected", 0),
      0u);
}

TEST(ChoiceTest, ExactStringsAndPrefixes) {
  const auto vocab = std::make_shared<const Vocabulary>(
      std::vector<std::string>{"a", "b", "ab", "abc", "c", ""}, std::vector<int32_t>{5});
  const std::vector<std::string> choices = {"a", "ab", ""};
  const auto g = ok_or_null(Grammar::choice(choices, vocab));
  ASSERT_NE(g, nullptr);
  auto m = g->matcher();
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{0, 2, 5}));  // "" is a choice: EOS at once
  EXPECT_FALSE(m->finished());
  expect_accept(*m, 0);
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{1, 5}));
  EXPECT_TRUE(m->accepting());
  EXPECT_FALSE(m->finished());
  expect_accept(*m, 1);
  EXPECT_TRUE(m->finished());
  EXPECT_EQ(allowed_ids(*m, *vocab), (Ids{5}));

  const std::vector<std::string> only_empty = {""};
  const auto g2 = ok_or_null(Grammar::choice(only_empty, vocab));
  auto m2 = g2->matcher();
  EXPECT_TRUE(m2->finished());
  EXPECT_EQ(allowed_ids(*m2, *vocab), (Ids{5}));
}

TEST(ChoiceTest, LiteralBytesWithoutRegexMeaning) {
  const std::vector<std::string> choices = {"a.b", "(x)", "a.b", "\xCF\x89*", "abd", "abc"};
  const auto g = ok_or_null(Grammar::choice(choices, byte_vocabulary()));
  ASSERT_NE(g, nullptr);
  for (const std::string& s : choices) EXPECT_TRUE(full_match(*g, s)) << s;
  for (const std::string s : {"axb", "x", "", "\xCF\x89", "\xCF\x89\xCF\x89", "ab", "abcd"}) {
    EXPECT_FALSE(full_match(*g, s)) << s;
  }
  const auto none = Grammar::choice({}, byte_vocabulary());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(none.status().message(), "choice: expected at least one string, got none");
}

// A schema whose parts each pass json_schema_to_regex's limits but whose whole automaton is
// over the DFA cap: the error says it came from the schema.
TEST(JsonSchemaGrammarTest, AnAutomatonOverTheCapNamesTheSchema) {
  const auto g = Grammar::json_schema(
      R"({"type":"object","properties":{"a":{"type":"string","maxLength":1000},)"
      R"("b":{"type":"string","maxLength":1000},"c":{"type":"string","maxLength":1000}},)"
      R"("required":["a","b","c"]})",
      byte_vocabulary());
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g.status().message().rfind("json_schema: the schema's matcher does not compile: regex: "
                                       "too complex",
                                       0),
            0u)
      << g.status().message();
  const auto ok = Grammar::json_schema(R"({"type":"string","maxLength":8})", byte_vocabulary());
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_TRUE(full_match(**ok, "\"abc\""));
}

// Every free-form form (json_schema.h) compiles. Its values run the JSON recognizer (any depth
// to kMaxJsonDepth: json_object_test.cc tests it): a document one container deeper than
// kMaxFreeFormDepth is taken. Under a whitespace pattern of the request's, and where the
// free-form value is ambiguous (anyOf a string or anything), the regex spells the value out:
// the matcher takes a document at kMaxFreeFormDepth levels and stops at the byte that would
// open one more.
TEST(JsonSchemaGrammarTest, FreeFormValuesNestUnlessSpeltOut) {
  struct Case {
    const char* schema;
    std::string valid;
    std::string too_deep;  // valid JSON, one container deeper than allowed when spelt out
    std::size_t too_deep_accepted_bytes;
    bool schema_allows_too_deep = true;  // false: the schema's own constraint refuses it
  };
  const Case cases[] = {
      {"true", R"({"a":[1,"x\"y"]})", R"({"a":[[1]]})", 6},
      {"{}", "[ {} , null ]", "[[[]]]", 2},
      {R"({"type":"object"})", R"({"k":{"j":-1.5e3}})", R"({"k":{"j":{}}})", 10},
      {R"({"type":"object","additionalProperties":true})", "{}", R"({"k":[[]]})", 6},
      {R"({"type":"array"})", R"([true,[false]])", R"([[[]]])", 2},
      {R"({"type":"array","items":true,"maxItems":2})", "[1,{}]", R"([{"a":[]}])", 6},
      {R"({"type":"object","additionalProperties":{"type":"integer"}})", R"({"a":1,"b":2})",
       R"({"a":{}})", 5, false},
      {R"({"type":"object","properties":{"name":{"type":"string"},"arguments":{"type":"object"}},)"
       R"("required":["name","arguments"]})",
       R"({"name":"f","arguments":{"x":[1]}})", R"({"name":"f","arguments":{"x":[[1]]}})", 30},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.schema);
    const auto g = Grammar::json_schema(c.schema, byte_vocabulary());
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_TRUE(full_match(**g, c.valid)) << c.valid;
    EXPECT_EQ(full_match(**g, c.too_deep), c.schema_allows_too_deep) << c.too_deep;
    const auto spelt = Grammar::json_schema(c.schema, byte_vocabulary(), " ?");
    ASSERT_TRUE(spelt.ok()) << spelt.status().to_string();
    EXPECT_TRUE(full_match(**spelt, c.valid)) << c.valid;
    auto m = (*spelt)->matcher();
    EXPECT_EQ(feed_bytes(*m, c.too_deep), c.too_deep_accepted_bytes) << c.too_deep;
  }
  const auto ambiguous =
      Grammar::json_schema(R"({"anyOf":[{"type":"string","maxLength":2},{}]})", byte_vocabulary());
  ASSERT_TRUE(ambiguous.ok()) << ambiguous.status().to_string();
  for (const std::string doc : {R"("ab")", R"("abc")", "[[1],{}]", "-1.5"}) {
    EXPECT_TRUE(full_match(**ambiguous, doc)) << doc;
  }
  auto m = (*ambiguous)->matcher();
  EXPECT_EQ(feed_bytes(*m, "[[[]]]"), 2u);
}

// Random vocabularies over the bytes the grammars care about (multi-byte characters often
// split across tokens), random walks through allowed tokens: every mask equals the brute-force
// one, and replaying the walk (now from the cache) gives the same masks.
TEST(MaskTest, RandomWalksMatchBruteForceAndCache) {
  const std::vector<std::string> pieces = {
      "a",    "b",    "c",        "x",        "{",        "}",    "[",   "]",    "\"",
      ":",    ",",    "0",        "1",        "2",        "-",    ".",   "e",    " ",
      "\n",   "\\",   "u",        "d",        "8",        "t",    "rue", "null", "\xCF\x89",
      "\xCF", "\x89", "\xCE\xB1", "\xF0\x9F", "\x98\x80", "\xFF", "k"};
  const std::vector<std::string> patterns = {"[a-c]*",
                                             "(ab|ba)+c?",
                                             "\\{\"k\":\\d{1,3}\\}",
                                             ".{0,5}",
                                             "[\xCE\xB1-\xCF\x89]{1,3}x",
                                             "\"([^\"\\\\]|\\\\u[0-9a-d]{4})*\""};
  int num_steps = 0;
  for (uint32_t seed = 0; seed < 48; ++seed) {
    std::mt19937 rng(seed);
    std::vector<std::string> tokens;
    const auto n = static_cast<uint32_t>(40 + rng() % 80);
    for (uint32_t i = 0; i < n; ++i) {
      std::string t;
      for (auto k = static_cast<uint32_t>(1 + rng() % 3); k > 0; --k)
        t += pieces[rng() % pieces.size()];
      tokens.push_back(rng() % 25 == 0 ? std::string() : t);
    }
    const auto eos = static_cast<int32_t>(rng() % n);
    tokens[static_cast<std::size_t>(eos)] = "";
    const auto vocab =
        std::make_shared<const Vocabulary>(std::move(tokens), std::vector<int32_t>{eos});
    std::vector<std::shared_ptr<const Grammar>> grammars;
    for (const std::string& p : patterns) grammars.push_back(ok_or_null(Grammar::regex(p, vocab)));
    grammars.push_back(ok_or_null(Grammar::json_object(vocab)));
    // Free-form values: the schema's DFA and the JSON recognizer in one state.
    grammars.push_back(ok_or_null(Grammar::json_schema("true", vocab)));
    grammars.push_back(ok_or_null(Grammar::json_schema(
        R"({"type":"object","properties":{"k":{},"a":{"type":"integer"}},"required":["k"]})",
        vocab)));
    const std::vector<std::string> choices = {"ab", "abc", "b", "", "\xCF\x89\xCF\x89"};
    grammars.push_back(ok_or_null(Grammar::choice(choices, vocab)));
    // Free text, the trigger scanner and the structures' automaton in one state.
    grammars.push_back(ok_or_null(Grammar::structural_tag(
        R"({"structures":[{"begin":"x{","schema":{"type":"integer"},"end":"}"},)"
        R"({"begin":"x[","schema":true,"end":"]"}],"triggers":["x"]})",
        vocab)));
    for (std::size_t gi = 0; gi < grammars.size(); ++gi) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " grammar " + std::to_string(gi));
      const Grammar& g = *grammars[gi];
      std::vector<int32_t> walk;
      std::vector<Ids> masks;
      auto m = g.matcher();
      for (int step = 0; step < 12 && !m->finished(); ++step) {
        const Ids mask = allowed_ids(*m, *vocab);
        ASSERT_EQ(mask, brute_force_ids(g, walk)) << "step " << step;
        masks.push_back(mask);
        ++num_steps;
        if (mask.empty()) break;
        auto it = mask.begin();
        std::advance(it, static_cast<long>(rng() % mask.size()));
        expect_accept(*m, *it);
        walk.push_back(*it);
      }
      auto replay = g.matcher();  // every state now has a cached mask
      for (std::size_t i = 0; i < masks.size(); ++i) {
        ASSERT_EQ(allowed_ids(*replay, *vocab), masks[i]) << "replay step " << i;
        if (i < walk.size()) expect_accept(*replay, walk[i]);
      }
    }
  }
  EXPECT_GT(num_steps, 1000);
}

TEST(MaskTest, MatchersOnSeveralThreadsShareOneGrammar) {
  const auto vocab = byte_vocabulary();
  const auto g = ok_or_null(Grammar::json_object(vocab));
  const std::string doc = "{\"a\": [1, 2.5, \"x\\u00e9\"], \"b\": {\"c\": null}}";
  // Masks along the document, computed on one thread from a fresh grammar as the reference.
  std::vector<Ids> expected;
  {
    const auto fresh = ok_or_null(Grammar::json_object(vocab));
    auto m = fresh->matcher();
    for (const char c : doc) {
      expected.push_back(allowed_ids(*m, *vocab));
      expect_accept(*m, static_cast<uint8_t>(c));
    }
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        auto m = g->matcher();
        std::vector<uint32_t> mask(static_cast<std::size_t>(vocab->mask_words()));
        for (std::size_t i = 0; i < doc.size(); ++i) {
          m->fill_mask(mask);
          if (testing::mask_ids(mask) != expected[i]) ++mismatches[static_cast<std::size_t>(t)];
          if (!m->accept(static_cast<uint8_t>(doc[i])).ok())
            ++mismatches[static_cast<std::size_t>(t)];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(MaskCacheTest, EvictsLeastRecentlyUsedBeyondCapacity) {
  MaskCache cache(/*capacity_bytes=*/24);  // three masks of two words
  const std::vector<uint32_t> m1 = {1, 1}, m2 = {2, 2}, m3 = {3, 3}, m4 = {4, 4};
  cache.insert({0, 1}, m1, 1);
  cache.insert({0, 2}, m2, 2);
  cache.insert({1, 3}, m3, 3);
  std::vector<uint32_t> out(2);
  ASSERT_EQ(cache.lookup({0, 1}, out), std::optional<int64_t>(1));  // 1 is now the newest
  EXPECT_EQ(out, m1);
  cache.insert({0, 1}, m4, 9);  // present: unchanged
  cache.insert({4, 4}, m4, 4);  // evicts 2, the least recently used
  EXPECT_EQ(cache.num_entries(), 3);
  EXPECT_EQ(cache.size_bytes(), 24);
  EXPECT_FALSE(cache.lookup({0, 2}, out).has_value());
  ASSERT_EQ(cache.lookup({0, 1}, out), std::optional<int64_t>(1));
  EXPECT_EQ(out, m1);
  ASSERT_EQ(cache.lookup({1, 3}, out), std::optional<int64_t>(3));
  EXPECT_EQ(out, m3);
  ASSERT_EQ(cache.lookup({4, 4}, out), std::optional<int64_t>(4));
  EXPECT_EQ(out, m4);
  EXPECT_FALSE(cache.lookup({3, 1}, out).has_value());  // both halves of the key count
}

// Exercises cold and cached masks on a 150k-token synthetic vocabulary; records the times
// as test properties (--gtest_output=xml) and asserts only the masks' agreement.
TEST(MaskTimingTest, ColdAndCachedMasksOnALargeVocabulary) {
  const auto vocab = testing::synthetic_vocabulary(150000, 1);
  using Clock = std::chrono::steady_clock;
  auto us = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  };
  std::vector<uint32_t> mask(static_cast<std::size_t>(vocab->mask_words()));
  std::vector<uint32_t> cached(mask.size());
  struct Case {
    std::string name;
    std::shared_ptr<const Grammar> grammar;
    std::string prefix;  // fed through the single-byte tokens (ids = byte values)
  };
  const std::vector<Case> cases = {
      {"json_object_in_string", ok_or_null(Grammar::json_object(vocab)), "{\"ab"},
      {"json_object_value", ok_or_null(Grammar::json_object(vocab)), "{\"ab\": "},
      {"regex_in_string",
       ok_or_null(Grammar::regex("\\{\"name\": \"[^\"\\\\]{0,40}\", \"age\": \\d{1,3}\\}", vocab)),
       "{\"name\": \"x"},
      {"regex_any", ok_or_null(Grammar::regex("(.|\\n)*", vocab)), ""},
  };
  for (const Case& c : cases) {
    ASSERT_NE(c.grammar, nullptr);
    auto m = c.grammar->matcher();
    ASSERT_EQ(feed_bytes(*m, c.prefix), c.prefix.size());
    const auto t0 = Clock::now();
    const int64_t cold_count = m->fill_mask(mask);
    const auto t1 = Clock::now();
    const int64_t cached_count = m->fill_mask(cached);
    const auto t2 = Clock::now();
    EXPECT_EQ(cold_count, cached_count);
    EXPECT_EQ(mask, cached);
    EXPECT_GT(cold_count, 0);
    ::testing::Test::RecordProperty(c.name + "_cold_us", std::to_string(us(t1 - t0)));
    ::testing::Test::RecordProperty(c.name + "_cached_us", std::to_string(us(t2 - t1)));
    ::testing::Test::RecordProperty(c.name + "_allowed", std::to_string(cold_count));
  }
}

}  // namespace
}  // namespace packserve::grammar
