// json_object_test.cc: Grammar::json_object, byte by byte. Oracles: documents and the byte
// each invalid one must be refused at, worked out by hand from RFC 8259 and the rules in
// grammar.h; and, on seeded random (often mutated) documents, nlohmann::json::accept, a
// strict RFC 8259 parser, restricted to what json_object adds (an object at top level,
// nothing after it).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "packserve/grammar/grammar.h"
#include "packserve/grammar/grammar_test_util.h"

namespace packserve::grammar {
namespace {

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

TEST(JsonObjectTest, AgreesWithNlohmannOnRandomMutatedDocuments) {
  const auto g = json_grammar();
  static const std::string kMutations =
      "{}[]\":,\\ 01.eE+-tfnu\x01\xC3\xA9\xFF\xED"
      "a\t";
  int num_valid = 0;
  int num_invalid = 0;
  for (uint32_t seed = 0; seed < 3000; ++seed) {
    std::mt19937 rng(seed);
    std::string doc = random_ws(rng) + random_object(rng, 1);
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

}  // namespace
}  // namespace packserve::grammar
