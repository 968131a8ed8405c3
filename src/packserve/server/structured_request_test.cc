// structured_request_test.cc: response_format, structured_outputs and guided_* map to the
// exact engine::StructuredOutput (schema key order kept); every malformed or unsupported form
// is 400 naming its field.
#include "packserve/server/structured_request.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "packserve/server/openai_request.h"

namespace packserve::server {
namespace {

using Kind = engine::StructuredOutput::Kind;

engine::StructuredOutput parse_ok(const std::string& extra,
                                  Endpoint endpoint = Endpoint::kChatCompletions) {
  const std::string body =
      endpoint == Endpoint::kChatCompletions
          ? R"({"model":"m","messages":[{"role":"user","content":"x"}],)" + extra + "}"
          : R"({"model":"m","prompt":"x",)" + extra + "}";
  ApiResult<OpenAiRequest> r = parse_openai_request(body, endpoint);
  EXPECT_TRUE(r.ok()) << extra << ": " << r.error().message;
  if (!r.ok()) return {};
  const engine::SamplingParams p = to_sampling_params(r.value(), 8);
  EXPECT_EQ(p.structured.kind, r.value().structured.kind);
  EXPECT_EQ(p.structured.spec, r.value().structured.spec);
  EXPECT_TRUE(p.validate().ok()) << p.validate().to_string();
  return r.value().structured;
}

TEST(StructuredRequest, ResponseFormatKeepsTheSchemaKeyOrder) {
  const engine::StructuredOutput s = parse_ok(
      R"("response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,
         "schema":{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}},
                   "required":["zeta"]}}})");
  EXPECT_EQ(s.kind, Kind::kJsonSchema);
  EXPECT_EQ(s.field, "response_format");
  EXPECT_EQ(
      s.spec,
      R"({"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}},)"
      R"("required":["zeta"]})");
}

TEST(StructuredRequest, EveryFormMapsExactly) {
  engine::StructuredOutput s = parse_ok(R"("response_format":{"type":"json_object"})");
  EXPECT_EQ(s.kind, Kind::kJsonObject);
  EXPECT_EQ(s.field, "response_format");
  s = parse_ok(R"("response_format":{"type":"text"})");
  EXPECT_EQ(s.kind, Kind::kNone);
  s = parse_ok(R"("response_format":null)");
  EXPECT_EQ(s.kind, Kind::kNone);
  s = parse_ok(R"("structured_outputs":{"json":{"type":"integer"}})", Endpoint::kCompletions);
  EXPECT_EQ(s.kind, Kind::kJsonSchema);
  EXPECT_EQ(s.field, "structured_outputs");
  EXPECT_EQ(s.spec, R"({"type":"integer"})");
  s = parse_ok(R"("structured_outputs":{"json":"{\"type\": \"boolean\"}"})");
  EXPECT_EQ(s.spec, R"({"type": "boolean"})");  // a string is the schema's text as written
  s = parse_ok(R"("structured_outputs":{"regex":"[a-z]+","disable_fallback":true})");
  EXPECT_EQ(s.kind, Kind::kRegex);
  EXPECT_EQ(s.spec, "[a-z]+");
  s = parse_ok(R"("structured_outputs":{"choice":["yes","no",""],"regex":null})");
  EXPECT_EQ(s.kind, Kind::kChoice);
  EXPECT_EQ(s.choices, (std::vector<std::string>{"yes", "no", ""}));
  s = parse_ok(R"("structured_outputs":{"json_object":true})");
  EXPECT_EQ(s.kind, Kind::kJsonObject);
  s = parse_ok(R"("structured_outputs":{"json_object":false})");
  EXPECT_EQ(s.kind, Kind::kNone);
  s = parse_ok(
      R"("guided_json":{"type":"object","properties":{"b":{"type":"null"},"a":{"enum":[1]}}},
                  "guided_decoding_backend":"xgrammar")");
  EXPECT_EQ(s.kind, Kind::kJsonSchema);
  EXPECT_EQ(s.field, "guided_json");
  EXPECT_EQ(s.spec, R"({"type":"object","properties":{"b":{"type":"null"},"a":{"enum":[1]}}})");
  s = parse_ok(R"("guided_regex":"\\d{3}")", Endpoint::kCompletions);
  EXPECT_EQ(s.kind, Kind::kRegex);
  EXPECT_EQ(s.field, "guided_regex");
  EXPECT_EQ(s.spec, "\\d{3}");
  s = parse_ok(R"("structured_outputs":{"grammar":"root ::= \"a\""})");
  EXPECT_EQ(s.kind, Kind::kGrammar);
  EXPECT_EQ(s.spec, R"(root ::= "a")");
  s = parse_ok(R"("guided_grammar":"root ::= [0-9]+")", Endpoint::kCompletions);
  EXPECT_EQ(s.kind, Kind::kGrammar);
  EXPECT_EQ(s.field, "guided_grammar");
  EXPECT_EQ(s.spec, "root ::= [0-9]+");
  s = parse_ok(R"("guided_choice":["a"])");
  EXPECT_EQ(s.kind, Kind::kChoice);
  EXPECT_EQ(s.field, "guided_choice");
  // A structural tag: response_format's object itself (keys as written), or
  // structured_outputs' text or object.
  s = parse_ok(R"("response_format":{"type":"structural_tag","structures":[{"begin":"<f>",
      "schema":{"properties":{"z":{},"a":{}}},"end":"</f>"}],"triggers":["<f"]})");
  EXPECT_EQ(s.kind, Kind::kStructuralTag);
  EXPECT_EQ(s.field, "response_format");
  EXPECT_EQ(s.spec,
            R"({"type":"structural_tag","structures":[{"begin":"<f>","schema":{"properties":)"
            R"({"z":{},"a":{}}},"end":"</f>"}],"triggers":["<f"]})");
  s = parse_ok(R"("structured_outputs":{"structural_tag":"{\"triggers\": []}"})");
  EXPECT_EQ(s.kind, Kind::kStructuralTag);
  EXPECT_EQ(s.field, "structured_outputs");
  EXPECT_EQ(s.spec, R"({"triggers": []})");  // checked by the engine's compile
  s = parse_ok(R"("structured_outputs":{"structural_tag":{"triggers":["b","a"]}})");
  EXPECT_EQ(s.spec, R"({"triggers":["b","a"]})");
  // A text response_format beside a guided field constrains nothing by itself.
  s = parse_ok(R"("response_format":{"type":"text"},"guided_regex":"x")");
  EXPECT_EQ(s.kind, Kind::kRegex);
  s = parse_ok("\"temperature\":0");
  EXPECT_FALSE(s.active());
  EXPECT_FALSE(s.whitespace.has_value());
}

// vLLM's whitespace controls: disable_any_whitespace (JSON without whitespace) and
// guided_whitespace_pattern (a JSON schema's whitespace regex); neither shapes non-JSON kinds.
TEST(StructuredRequest, WhitespaceOptions) {
  engine::StructuredOutput s =
      parse_ok(R"("structured_outputs":{"json":{"type":"object"},"disable_any_whitespace":true})");
  EXPECT_EQ(s.kind, Kind::kJsonSchema);
  EXPECT_EQ(s.whitespace, std::optional<std::string>(""));
  s = parse_ok(R"("structured_outputs":{"disable_any_whitespace":true,"json_object":true})");
  EXPECT_EQ(s.kind, Kind::kJsonObject);
  EXPECT_EQ(s.whitespace, std::optional<std::string>(""));
  s = parse_ok(R"("structured_outputs":{"regex":"a b","disable_any_whitespace":true})");
  EXPECT_EQ(s.kind, Kind::kRegex);
  EXPECT_FALSE(s.whitespace.has_value());
  s = parse_ok(R"("structured_outputs":{"json":{},"disable_any_whitespace":false})");
  EXPECT_FALSE(s.whitespace.has_value());
  s = parse_ok(R"("guided_json":{"type":"integer"},"guided_whitespace_pattern":"[ ]?")");
  EXPECT_EQ(s.whitespace, std::optional<std::string>("[ ]?"));
  s = parse_ok(R"("response_format":{"type":"json_schema","json_schema":{"schema":{}}},
                  "guided_whitespace_pattern":"\n?")");
  EXPECT_EQ(s.whitespace, std::optional<std::string>("\n?"));
  s = parse_ok(R"("guided_regex":"x","guided_whitespace_pattern":" ")");
  EXPECT_EQ(s.kind, Kind::kRegex);
  EXPECT_FALSE(s.whitespace.has_value());
  // vLLM's newer name for the pattern, inside structured_outputs.
  s = parse_ok(R"("structured_outputs":{"json":{"type":"array"},"whitespace_pattern":" ?"})");
  EXPECT_EQ(s.kind, Kind::kJsonSchema);
  EXPECT_EQ(s.whitespace, std::optional<std::string>(" ?"));
  s = parse_ok(R"("structured_outputs":{"regex":"x","whitespace_pattern":" "})");
  EXPECT_FALSE(s.whitespace.has_value());
}

TEST(StructuredRequest, EveryErrorIs400NamingTheField) {
  struct Case {
    const char* extra;
    const char* param;
    const char* message;
  };
  const Case cases[] = {
      {R"("response_format":"json")", "response_format", "an object with a \"type\""},
      {R"("response_format":{})", "response_format.type", "\"json_schema\""},
      {R"("response_format":{"type":"xml"})", "response_format.type", "got \"xml\""},
      {R"("response_format":{"type":"structural_tag","tags":[]})", "response_format",
       "response_format.tags: not expected with type \"structural_tag\""},
      {R"("response_format":{"type":"json_object","schema":{}})", "response_format",
       "response_format.schema: not expected"},
      {R"("response_format":{"type":"json_schema"})", "response_format.json_schema",
       "an object with a \"schema\""},
      {R"("response_format":{"type":"json_schema","json_schema":{"name":"x"}})", "response_format",
       "schema: required"},
      {R"("response_format":{"type":"json_schema","json_schema":{"schema":{},"strict":1}})",
       "response_format.json_schema.strict", "true or false"},
      {R"("response_format":{"type":"json_schema","json_schema":{"schema":{},"extra":1}})",
       "response_format", "json_schema.extra: not expected"},
      {R"("response_format":{"type":"json_schema","json_schema":{"schema":5}})",
       "response_format.json_schema.schema", "a JSON schema"},
      {R"("structured_outputs":[1])", "structured_outputs", "an object"},
      {R"("structured_outputs":{"grammar":""})", "structured_outputs.grammar",
       "a non-empty GBNF / EBNF grammar"},
      {R"("structured_outputs":{"structural_tag":3})", "structured_outputs.structural_tag",
       "a structural tag (its JSON text, or an object)"},
      {R"("structured_outputs":{"structural_tag":""})", "structured_outputs.structural_tag",
       "a JSON schema"},
      {R"("structured_outputs":{"regex":"a","choice":["b"]})", "structured_outputs", "only one of"},
      {R"("structured_outputs":{"regex":""})", "structured_outputs.regex",
       "a non-empty regular expression"},
      {R"("structured_outputs":{"choice":[]})", "structured_outputs.choice", "non-empty list"},
      {R"("structured_outputs":{"choice":["a",2]})", "structured_outputs.choice[1]", "a string"},
      {R"("structured_outputs":{"json_object":"yes"})", "structured_outputs.json_object",
       "true or false"},
      {R"("structured_outputs":{"regex":"a","disable_any_whitespace":1})",
       "structured_outputs.disable_any_whitespace", "true or false"},
      {R"("guided_json":"")", "guided_json", "a JSON schema"},
      {R"("guided_json":[1])", "guided_json", "a JSON schema"},
      {R"("guided_regex":7)", "guided_regex", "a non-empty regular expression"},
      {R"("guided_choice":"a")", "guided_choice", "non-empty list"},
      {R"("guided_grammar":["root ::= x"])", "guided_grammar", "a non-empty GBNF / EBNF grammar"},
      {R"("guided_whitespace_pattern":1)", "guided_whitespace_pattern", "a string (a regex)"},
      {R"("guided_json":{},"guided_whitespace_pattern":"(")", "guided_whitespace_pattern",
       "guided_whitespace_pattern: regex: position"},
      {R"("response_format":{"type":"json_object"},"guided_whitespace_pattern":" ")",
       "guided_whitespace_pattern", "applies to a JSON schema, not to a json_object"},
      {R"("structured_outputs":{"json":{},"disable_any_whitespace":true},
          "guided_whitespace_pattern":" ")",
       "guided_whitespace_pattern", "not with structured_outputs.disable_any_whitespace"},
      {R"("structured_outputs":{"json":{},"whitespace_pattern":2})",
       "structured_outputs.whitespace_pattern", "a string (a regex)"},
      {R"("structured_outputs":{"json":{},"whitespace_pattern":"("})",
       "structured_outputs.whitespace_pattern", "structured_outputs.whitespace_pattern: regex:"},
      {R"("structured_outputs":{"json_object":true,"whitespace_pattern":" "})",
       "structured_outputs.whitespace_pattern", "applies to a JSON schema"},
      {R"("structured_outputs":{"json":{},"whitespace_pattern":" "},
          "guided_whitespace_pattern":" ")",
       "structured_outputs.whitespace_pattern", "not with guided_whitespace_pattern"},
      {R"("guided_decoding_backend":1)", "guided_decoding_backend", "a string"},
      {R"("guided_regex":"a","guided_choice":["b"])", "guided_choice",
       "guided_regex constrains it already"},
      {R"("response_format":{"type":"json_object"},"guided_regex":"a")", "guided_regex",
       "response_format constrains it already"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.extra);
    const std::string body =
        R"({"model":"m","messages":[{"role":"user","content":"x"}],)" + std::string(c.extra) + "}";
    ApiResult<OpenAiRequest> r = parse_openai_request(body, Endpoint::kChatCompletions);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().status, 400);
    ASSERT_TRUE(r.error().param.has_value());
    EXPECT_EQ(*r.error().param, c.param);
    EXPECT_NE(r.error().message.find(c.message), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace packserve::server
