// json_object_test.cc: the JSON recognizer (json_automaton.h), byte by byte: Grammar::json_object,
// and Grammar::json_schema's free-form values, which run it (grammar_json_schema.cc). Oracles:
// documents and the byte each invalid one must be refused at, worked out by hand from RFC 8259
// and the rules in grammar.h; on seeded random (often mutated) documents, nlohmann::json::accept,
// a strict RFC 8259 parser, restricted to what json_object adds (an object at top level,
// nothing after it) or to the free-form value's place in the schema; and json_object's masks
// for the schema {"type": "object"}, which allows the same documents.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "packserve/grammar/grammar.h"
#include "packserve/grammar/grammar_test_util.h"

namespace packserve::grammar {
namespace {

using testing::allowed_ids;
using testing::byte_vocabulary;
using testing::feed_bytes;
using testing::full_match;

std::shared_ptr<const Grammar> json_grammar() {
  auto g = Grammar::json_object(byte_vocabulary());
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return *g;
}

TEST(JsonObjectTest, AcceptsValidDocuments) {
  const auto g = json_grammar();
  const std::vector<std::string> docs = {
      "{}",
      " \t\n\r{}",
      "{\"a\":1}",
      "{ \"a\" : [ 1 , 2.5e-3 , -0 , 0.0 , 1E+2 , true , false , null ] }",
      "{\"a\":{\"b\":{\"c\":[[],{},[{}]]}},\"d\":[]}",
      "{\"s\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\u00e9\\uFFFF\"}",
      "{\"e\":\"\\ud83d\\ude00\\uD83D\\uDE00\"}",
      "{\"\xC3\xA9\":\"\xF0\x9F\x98\x80 \xCF\x89 \xEF\xBF\xBF \xF4\x8F\xBF\xBF\"}",
      "{\"n\":[0,-0,1,-1,10,0.5,-0.5e10,1e5,1E-5,1e+0,123456789012345678901234567890]}",
      "{\"a\"\t:\n1\r,\"b\":2}",
      "{\"\":\"\"}",
      "{\"k\":\"{}[],:\"}",
      std::string(20, ' ') + "{}",
      "{" + std::string(20, ' ') + "\"a\"" + std::string(20, '\n') + ":1}",
  };
  for (const std::string& doc : docs) {
    SCOPED_TRACE("doc " + doc);
    auto m = g->matcher();
    ASSERT_EQ(feed_bytes(*m, doc), doc.size());
    EXPECT_TRUE(m->accepting());
    EXPECT_TRUE(m->finished());                // nothing may follow the closing brace
    EXPECT_TRUE(nlohmann::json::accept(doc));  // the documents themselves are valid JSON
  }
}

struct Refusal {
  std::string doc;
  std::size_t refused_at;        // index of the first refused byte; doc.size(): all bytes pass
  bool complete_before = false;  // the bytes before refused_at are a complete object
};

TEST(JsonObjectTest, RefusesInvalidDocumentsAtTheRightByte) {
  const auto g = json_grammar();
  const std::vector<Refusal> cases = {
      {"{\"a\":1,}", 7},                    // trailing comma: a key must follow
      {"{\"a\":01}", 6},                    // leading zero
      {"{\"a\":-01}", 7},                   // leading zero after the sign
      {"[1]", 0},                           // a bare array at top
      {"\"x\"", 0},                         // a bare string at top
      {"1", 0},                             // a bare number at top
      {"{\"a\":\"b\x01\"}", 7},             // a control character in a string
      {"{\"a\":\"b\n\"}", 7},               // a raw newline in a string
      {"{\"a\":1} ", 7, true},              // whitespace after the object
      {"{\"a\":1}x", 7, true},              // anything after the object
      {"{\"a\":1}{}", 7, true},             // a second object
      {"{\"a\" 1}", 5},                     // missing colon
      {"{\"a\":tru}", 8},                   // a truncated literal
      {"{\"a\":trUe}", 7},                  // literals are case-sensitive
      {"{\"a\":nulll}", 9},                 // a literal runs on
      {"{\"a\":-}", 6},                     // a sign without digits
      {"{\"a\":1.}", 7},                    // a dot without digits
      {"{\"a\":1e}", 7},                    // an exponent without digits
      {"{\"a\":1e+}", 8},                   // an exponent sign without digits
      {"{\"a\":.5}", 5},                    // no integer part
      {"{\"a\":+1}", 5},                    // a plus sign
      {"{\"a\":0x1}", 6},                   // hex
      {"{\"a\":NaN}", 5},                   // not a JSON number
      {"{\"a\":\"\\x\"}", 7},               // a bad escape
      {"{\"a\":\"\\u12G4\"}", 10},          // a bad hex digit
      {"{\"a\":\"\\ud800\"}", 12},          // a lone high surrogate: '\' of the low one expected
      {"{\"a\":\"\\ud800\\u0041\"}", 14},   // a high surrogate then no low one
      {"{\"a\":\"\\udc00\"}", 9},           // a lone low surrogate
      {"{\"a\":\"\xC3\x28\"}", 7},          // a truncated 2-byte character
      {"{\"a\":\"\xED\xA0\x80\"}", 7},      // an encoded surrogate
      {"{\"a\":\"\xC0\xAF\"}", 6},          // an overlong form
      {"{\"a\":\"\xF4\x90\x80\x80\"}", 7},  // past U+10FFFF
      {"{\"a\":\"\xFF\"}", 6},              // never a UTF-8 byte
      {"{\"a\":\"\x80\"}", 6},              // a lone continuation byte
      {"{'a':1}", 1},                       // single quotes
      {"{a:1}", 1},                         // an unquoted key
      {"{1:1}", 1},                         // a number key
      {"{\"a\":1]", 6},                     // the wrong closing bracket
      {"{\"a\":[1}", 7},                    // the wrong closing bracket
      {"{,}", 1},                           // a comma with nothing before it
      {"{\"a\":[1,]}", 8},                  // a trailing comma in an array
      {"{\"a\":[,1]}", 6},                  // a leading comma in an array
      {"{\"a\":1,\"b\"}", 10},              // a key without a value
      {"{\"a\"::1}", 5},                    // two colons
      {"{\"a\":1 2}", 7},                   // two values
      {"{\"a\":1", 6},                      // incomplete: every byte passes
      {"{\"a\":\"", 6},                     // incomplete inside a string
  };
  for (const Refusal& c : cases) {
    SCOPED_TRACE("doc " + c.doc);
    auto m = g->matcher();
    EXPECT_EQ(feed_bytes(*m, c.doc), c.refused_at);
    EXPECT_EQ(m->accepting(), c.complete_before);
    EXPECT_EQ(m->finished(), c.complete_before);
  }
}

TEST(JsonObjectTest, DepthIsLimitedToMaxDepthContainers) {
  const auto g = json_grammar();
  // The top-level object is container 1: 31 more arrays make kMaxJsonDepth = 32.
  const std::string deep = "{\"a\":" + std::string(31, '[') + std::string(31, ']') + "}";
  EXPECT_TRUE(full_match(*g, deep));
  const std::string mixed =
      "{\"a\":" + std::string(30, '[') + "{\"b\":1}" + std::string(30, ']') + "}";
  EXPECT_TRUE(full_match(*g, mixed));
  const std::string too_deep = "{\"a\":" + std::string(32, '[');
  auto m = g->matcher();
  EXPECT_EQ(feed_bytes(*m, too_deep), 5u + 31u);  // the 33rd container is refused
  auto m2 = g->matcher();
  EXPECT_EQ(feed_bytes(*m2, "{\"a\":" + std::string(31, '[') + "{"), 5u + 31u);
}

TEST(JsonObjectTest, WhitespaceRunsAreLimited) {
  const auto g = json_grammar();
  auto m = g->matcher();
  EXPECT_EQ(feed_bytes(*m, "{" + std::string(21, ' ') + "}"), 1u + 20u);
  auto m2 = g->matcher();
  EXPECT_EQ(feed_bytes(*m2, std::string(21, '\t') + "{}"), 20u);
  auto m3 = g->matcher();  // a number ended by whitespace: the whitespace counts
  EXPECT_EQ(feed_bytes(*m3, "{\"a\":1" + std::string(21, '\n') + "}"), 6u + 20u);
  // Whitespace inside a string is content, not counted.
  EXPECT_TRUE(full_match(*g, "{\"a\":\"" + std::string(100, ' ') + "\"}"));
}

// allow_whitespace false (vLLM's disable_any_whitespace): compact documents only; whitespace
// inside strings is still content.
TEST(JsonObjectTest, WithoutWhitespace) {
  auto g = Grammar::json_object(byte_vocabulary(), /*allow_whitespace=*/false);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_TRUE(full_match(**g, R"({"a":[1,{"b":null}],"c":" x "})"));
  EXPECT_TRUE(full_match(**g, "{}"));
  for (const std::string doc : {" {}", "{ }", R"({"a": 1})", R"({"a":1 })", R"({"a":[1, 2]})"}) {
    auto m = (*g)->matcher();
    EXPECT_EQ(feed_bytes(*m, doc), doc.find_first_of(" ")) << doc;
  }
}

// A random JSON object, without whitespace runs over 3 bytes or depth over 6.
std::string random_value(std::mt19937& rng, int depth);

std::string random_string(std::mt19937& rng) {
  static const std::vector<std::string> pieces = {"a",
                                                  "B",
                                                  " ",
                                                  "\\\"",
                                                  "\\\\",
                                                  "\\/",
                                                  "\\n",
                                                  "\\u00e9",
                                                  "\\ud83d\\ude00",
                                                  "\xC3\xA9",
                                                  "\xF0\x9F\x98\x80",
                                                  "{",
                                                  "]",
                                                  ":",
                                                  ",",
                                                  "1",
                                                  "\\t"};
  std::string s = "\"";
  for (auto n = static_cast<uint32_t>(rng() % 4); n > 0; --n) s += pieces[rng() % pieces.size()];
  return s + "\"";
}

std::string random_ws(std::mt19937& rng) {
  static const char kWs[] = {' ', '\t', '\n', '\r'};
  std::string s;
  if (rng() % 3 == 0) {
    for (auto n = static_cast<uint32_t>(1 + rng() % 3); n > 0; --n) s += kWs[rng() % 4];
  }
  return s;
}

std::string random_number(std::mt19937& rng) {
  std::string s = rng() % 3 == 0 ? "-" : "";
  s += rng() % 3 == 0 ? "0" : std::to_string(1 + rng() % 1000);
  if (rng() % 2 == 0) s += "." + std::to_string(rng() % 100);
  if (rng() % 3 == 0) s += std::string(rng() % 2 ? "e" : "E") + (rng() % 2 ? "-" : "") + "1";
  return s;
}

std::string random_object(std::mt19937& rng, int depth) {
  std::string s = "{" + random_ws(rng);
  const auto n = static_cast<uint32_t>(depth >= 6 ? 0 : rng() % 4);
  for (uint32_t i = 0; i < n; ++i) {
    if (i > 0) s += "," + random_ws(rng);
    s += random_string(rng) + random_ws(rng) + ":" + random_ws(rng) + random_value(rng, depth) +
         random_ws(rng);
  }
  return s + "}";
}

std::string random_value(std::mt19937& rng, int depth) {
  switch (rng() % 8) {
    case 0:
      return random_object(rng, depth + 1);
    case 1: {
      std::string s = "[" + random_ws(rng);
      const auto n = static_cast<uint32_t>(depth >= 6 ? 0 : rng() % 4);
      for (uint32_t i = 0; i < n; ++i) {
        if (i > 0) s += "," + random_ws(rng);
        s += random_value(rng, depth + 1) + random_ws(rng);
      }
      return s + "]";
    }
    case 2:
      return random_string(rng);
    case 3:
      return rng() % 2 ? "true" : "false";
    case 4:
      return "null";
    default:
      return random_number(rng);
  }
}

// Mutates `doc` at up to two random places with bytes JSON cares about (the free-form hole's
// byte U+0001 among them).
void mutate(std::mt19937& rng, std::string& doc) {
  static const std::string kMutations =
      "{}[]\":,\\ 01.eE+-tfnu\x01\xC3\xA9\xFF\xED"
      "a\t";
  for (auto n = static_cast<uint32_t>(rng() % 3); n > 0 && !doc.empty(); --n) {
    const std::size_t at = rng() % doc.size();
    const char c = kMutations[rng() % kMutations.size()];
    switch (rng() % 3) {
      case 0:
        doc.erase(at, 1);
        break;
      case 1:
        doc.insert(at, 1, c);
        break;
      default:
        doc[at] = c;
        break;
    }
  }
}

TEST(JsonObjectTest, AgreesWithNlohmannOnRandomMutatedDocuments) {
  const auto g = json_grammar();
  int num_valid = 0;
  int num_invalid = 0;
  for (uint32_t seed = 0; seed < 3000; ++seed) {
    std::mt19937 rng(seed);
    std::string doc = random_ws(rng) + random_object(rng, 1);
    mutate(rng, doc);
    SCOPED_TRACE("seed " + std::to_string(seed) + " doc " + doc);
    // nlohmann allows any JSON value and whitespace after it; json_object, one object and
    // nothing after it. Mutations keep whitespace runs <= 4 and depth <= 8.
    const std::size_t first = doc.find_first_not_of(" \t\n\r");
    const bool expected = nlohmann::json::accept(doc) && first != std::string::npos &&
                          doc[first] == '{' && doc.back() == '}';
    EXPECT_EQ(full_match(*g, doc), expected);
    (expected ? num_valid : num_invalid) += 1;
  }
  EXPECT_GT(num_valid, 500);
  EXPECT_GT(num_invalid, 500);
}

bool is_json_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::shared_ptr<const Grammar> schema_grammar(const std::string& schema,
                                              std::shared_ptr<const Vocabulary> vocab) {
  auto g = Grammar::json_schema(schema, std::move(vocab));
  EXPECT_TRUE(g.ok()) << schema << ": " << g.status().to_string();
  return g.ok() ? *g : nullptr;
}

// A free-form schema is any one JSON value (numbers end with the output), with no whitespace
// around it; and a free-form property's value is any value, the schema's structure after it
// (a number ends at the comma).
TEST(JsonFreeFormTest, AgreesWithNlohmannOnRandomMutatedValues) {
  const auto any = schema_grammar("true", byte_vocabulary());
  const auto empty = schema_grammar("{}", byte_vocabulary());
  const auto member = schema_grammar(
      R"({"type":"object","properties":{"a":true,"b":{"type":"integer"}},"required":["a","b"]})",
      byte_vocabulary());
  ASSERT_TRUE(any && empty && member);
  int num_valid = 0;
  int num_invalid = 0;
  for (uint32_t seed = 0; seed < 3000; ++seed) {
    std::mt19937 rng(seed);
    std::string value = random_value(rng, 1);
    mutate(rng, value);
    SCOPED_TRACE("seed " + std::to_string(seed) + " value " + value);
    const bool valid = nlohmann::json::accept(value);  // whitespace around it allowed
    const bool expected = valid && !is_json_ws(value.front()) && !is_json_ws(value.back());
    EXPECT_EQ(full_match(*any, value), expected);
    EXPECT_EQ(full_match(*empty, value), expected);
    // Inside the object the schema's whitespace surrounds the value.
    EXPECT_EQ(full_match(*member, R"({"a":)" + value + R"(,"b":12})"), valid);
    EXPECT_EQ(full_match(*member, R"({ "a" : )" + value + R"( , "b" : -3 })"), valid);
    (expected ? num_valid : num_invalid) += 1;
  }
  EXPECT_GT(num_valid, 500);
  EXPECT_GT(num_invalid, 500);
}

// Free-form values nest as deep as json_object's: kMaxJsonDepth containers in the value.
TEST(JsonFreeFormTest, NestsToTheRecognizersDepth) {
  const auto any = schema_grammar("true", byte_vocabulary());
  const auto object = schema_grammar(R"({"type":"object"})", byte_vocabulary());
  ASSERT_TRUE(any && object);
  const std::string deepest = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(full_match(*any, deepest));
  auto m = any->matcher();
  EXPECT_EQ(feed_bytes(*m, "[" + deepest + "]"), static_cast<std::size_t>(kMaxJsonDepth));
  // {"type":"object"}'s braces are the schema's; its values are free-form.
  EXPECT_TRUE(full_match(*object, R"({"a":)" + deepest + "}"));
  EXPECT_TRUE(full_match(*object, R"({"a":{"b":{"c":{"d":[1,{"e":null}]}}},"f":0})"));
  auto tail = object->matcher();
  ASSERT_EQ(feed_bytes(*tail, R"({"a":1})"), 7u);
  EXPECT_TRUE(tail->accepting());
  EXPECT_TRUE(tail->finished());
  auto number = any->matcher();
  ASSERT_EQ(feed_bytes(*number, "-12.5e3"), 7u);
  EXPECT_TRUE(number->accepting());
  EXPECT_FALSE(number->finished());  // more digits may follow
  auto open = any->matcher();
  ASSERT_EQ(feed_bytes(*open, "-12.5e"), 6u);
  EXPECT_FALSE(open->accepting());
}

// The schema {"type":"object"} allows what json_object does (the recognizer's depth counts
// from the schema's braces there, one more than json_object's; the walks stay far shallower):
// their masks agree along random walks over random vocabularies. The pieces leave out \u
// escapes, where the schema's keys (kJsonStringChar) allow lone surrogates and the recognizer
// does not.
TEST(JsonFreeFormTest, ObjectSchemaMasksEqualJsonObjectsAlongRandomWalks) {
  const std::vector<std::string> pieces = {
      "a", "k",  "{",  "}", "[", "]",   "\"",   ":",        ",",    "0",    "1", "-",    ".",   "e",
      " ", "\n", "\\", "n", "t", "rue", "null", "\xCF\x89", "\xCF", "\x89", "f", "alse", "\x01"};
  int num_steps = 0;
  for (uint32_t seed = 0; seed < 40; ++seed) {
    std::mt19937 rng(seed);
    std::vector<std::string> tokens = {"{"};  // json_object allows whitespace before it
    const auto n = static_cast<uint32_t>(60 + rng() % 80);
    for (uint32_t i = 1; i < n; ++i) {
      std::string t;
      for (auto k = static_cast<uint32_t>(1 + rng() % 3); k > 0; --k)
        t += pieces[rng() % pieces.size()];
      tokens.push_back(t);
    }
    const auto eos = static_cast<int32_t>(1 + rng() % (n - 1));
    tokens[static_cast<std::size_t>(eos)] = "";
    const auto vocab =
        std::make_shared<const Vocabulary>(std::move(tokens), std::vector<int32_t>{eos});
    const auto object = schema_grammar(R"({"type":"object"})", vocab);
    const auto reference = Grammar::json_object(vocab);
    ASSERT_TRUE(object && reference.ok());
    auto a = object->matcher();
    auto b = (*reference)->matcher();
    ASSERT_TRUE(a->accept(0).ok());
    ASSERT_TRUE(b->accept(0).ok());
    for (int step = 0; step < 40 && !b->finished(); ++step) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " step " + std::to_string(step));
      const std::set<int32_t> mask = allowed_ids(*b, *vocab);
      ASSERT_EQ(allowed_ids(*a, *vocab), mask);
      ASSERT_EQ(a->accepting(), b->accepting());
      ++num_steps;
      if (mask.empty()) break;
      auto it = mask.begin();
      std::advance(it, static_cast<long>(rng() % mask.size()));
      ASSERT_TRUE(a->accept(*it).ok());
      ASSERT_TRUE(b->accept(*it).ok());
    }
  }
  EXPECT_GT(num_steps, 400);
}

}  // namespace
}  // namespace packserve::grammar
