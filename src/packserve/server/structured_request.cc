// structured_request.cc: see structured_request.h.
#include "packserve/server/structured_request.h"

#include <set>
#include <string>
#include <vector>

#include "packserve/grammar/regex.h"
#include "packserve/server/request_json.h"

namespace packserve::server {
namespace {

using nlohmann::json;
using Kind = engine::StructuredOutput::Kind;

// The JSON text of the schema at `path` of the body, keys in the order written. `value` is
// body at that path: a string is taken as the schema's text as it is.
ApiResult<std::string> schema_text(const json& value, std::string_view raw_body,
                                   const std::vector<std::string>& path, const std::string& field) {
  if (value.is_string()) {
    if (value.get<std::string>().empty()) return wrong(field, "a JSON schema", value);
    return value.get<std::string>();
  }
  if (!value.is_object() && !value.is_boolean()) {
    return wrong(field, "a JSON schema (an object, or its text)", value);
  }
  // The body parsed and passed the depth check already.
  nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(raw_body.begin(), raw_body.end());
  const nlohmann::ordered_json* at = &ordered;
  for (const std::string& key : path) at = &at->at(key);
  return at->dump();
}

// Exactly one string among `choices`' elements: a non-empty list of strings.
ApiResult<std::vector<std::string>> choice_list(const json& v, const std::string& field) {
  if (!v.is_array() || v.empty()) return wrong(field, "a non-empty list of strings", v);
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) return wrong(field + "[" + std::to_string(i) + "]", "a string", v[i]);
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

std::optional<ApiError> regex_field(const json& v, const std::string& field,
                                    engine::StructuredOutput& out) {
  if (!v.is_string() || v.get<std::string>().empty()) {
    return wrong(field, "a non-empty regular expression", v);
  }
  out.kind = Kind::kRegex;
  out.spec = v.get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> grammar_field(const json& v, const std::string& field,
                                      engine::StructuredOutput& out) {
  if (!v.is_string() || v.get<std::string>().empty()) {
    return wrong(field, "a non-empty GBNF / EBNF grammar with a root rule", v);
  }
  out.kind = Kind::kGrammar;
  out.spec = v.get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> parse_response_format(const json& body, std::string_view raw_body,
                                              engine::StructuredOutput& out) {
  const std::string field = "response_format";
  const json& rf = body.at("response_format");
  if (!rf.is_object()) return wrong(field, "an object with a \"type\"", rf);
  if (!present(rf, "type") || !rf.at("type").is_string()) {
    return wrong(field + ".type",
                 "\"text\", \"json_object\", \"json_schema\" or \"structural_tag\"",
                 rf.contains("type") ? rf.at("type") : json(nullptr));
  }
  const std::string type = rf.at("type").get<std::string>();
  std::set<std::string> known = {"type"};
  if (type == "json_schema") known.insert("json_schema");
  if (type == "structural_tag") known.insert({"structures", "triggers", "format"});
  for (const auto& [key, value] : rf.items()) {
    if (known.count(key) == 0) {
      return bad_request(field + "." + key + ": not expected with type \"" + type + "\"", field);
    }
  }
  out.field = field;
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    out.kind = Kind::kJsonObject;
    return std::nullopt;
  }
  if (type == "structural_tag") {
    // vLLM's: the object itself is the tag (grammar.h Grammar::structural_tag checks it).
    out.kind = Kind::kStructuralTag;
    PS_API_ASSIGN(out.spec, schema_text(rf, raw_body, {"response_format"}, field));
    return std::nullopt;
  }
  if (type != "json_schema") {
    return wrong(field + ".type",
                 "\"text\", \"json_object\", \"json_schema\" or \"structural_tag\"", rf.at("type"));
  }
  if (!present(rf, "json_schema") || !rf.at("json_schema").is_object()) {
    return wrong(field + ".json_schema", "an object with a \"schema\"",
                 rf.contains("json_schema") ? rf.at("json_schema") : json(nullptr));
  }
  const json& js = rf.at("json_schema");
  for (const auto& [key, value] : js.items()) {
    const std::string f = field + ".json_schema." + key;
    if (key == "name" || key == "description") {
      if (!value.is_string() && !value.is_null()) return wrong(f, "a string", value);
    } else if (key == "strict") {
      if (!value.is_boolean() && !value.is_null()) return wrong(f, "true or false", value);
    } else if (key != "schema") {
      return bad_request(f + ": not expected (name, description, schema, strict)", field);
    }
  }
  if (!present(js, "schema")) {
    return bad_request(field + ".json_schema.schema: required", field);
  }
  out.kind = Kind::kJsonSchema;
  PS_API_ASSIGN(out.spec,
                schema_text(js.at("schema"), raw_body, {"response_format", "json_schema", "schema"},
                            field + ".json_schema.schema"));
  return std::nullopt;
}

// `whitespace_pattern`: its whitespace_pattern when given (vLLM's guided_whitespace_pattern
// under its newer name), applied by the caller.
std::optional<ApiError> parse_structured_outputs(const json& body, std::string_view raw_body,
                                                 engine::StructuredOutput& out,
                                                 std::optional<std::string>& whitespace_pattern) {
  const std::string field = "structured_outputs";
  const json& so = body.at(field);
  if (!so.is_object()) return wrong(field, "an object", so);
  out.field = field;
  std::string given;
  for (const auto& [key, value] : so.items()) {
    const std::string f = field + "." + key;
    if (value.is_null()) continue;
    if (key == "disable_fallback" || key == "disable_any_whitespace" ||
        key == "disable_additional_properties") {
      // Flags of vLLM's backends: packserve has no fallback backend, and follows a schema's
      // additionalProperties as written (grammar/json_schema.h), which vLLM's guidance backend
      // does unless disable_additional_properties. disable_any_whitespace: JSON (schema or
      // object) without whitespace between tokens; no effect on regex, choice and grammar.
      if (!value.is_boolean()) return wrong(f, "true or false", value);
      if (key == "disable_any_whitespace" && value.get<bool>()) out.whitespace = "";
      continue;
    }
    if (key == "whitespace_pattern") {
      if (!value.is_string()) return wrong(f, "a string (a regex)", value);
      whitespace_pattern = value.get<std::string>();
      continue;
    }
    if (key != "json" && key != "regex" && key != "choice" && key != "json_object" &&
        key != "grammar" && key != "structural_tag") {
      return bad_request(
          f + ": not supported (json, regex, choice, grammar, structural_tag or json_object)",
          field);
    }
    if (!given.empty()) {
      return bad_request(f +
                             ": only one of json, regex, choice, grammar, structural_tag and "
                             "json_object, got " +
                             given + " too",
                         field);
    }
    given = key;
    if (key == "json") {
      out.kind = Kind::kJsonSchema;
      PS_API_ASSIGN(out.spec, schema_text(value, raw_body, {field, key}, f));
    } else if (key == "regex") {
      PS_API_TRY(regex_field(value, f, out));
    } else if (key == "grammar") {
      PS_API_TRY(grammar_field(value, f, out));
    } else if (key == "structural_tag") {
      // The tag's JSON text (vLLM sends a string), or the tag as an object.
      if (!value.is_string() && !value.is_object()) {
        return wrong(f, "a structural tag (its JSON text, or an object)", value);
      }
      out.kind = Kind::kStructuralTag;
      PS_API_ASSIGN(out.spec, schema_text(value, raw_body, {field, key}, f));
    } else if (key == "choice") {
      out.kind = Kind::kChoice;
      PS_API_ASSIGN(out.choices, choice_list(value, f));
    } else {
      if (!value.is_boolean()) return wrong(f, "true or false", value);
      if (value.get<bool>()) out.kind = Kind::kJsonObject;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_structured_output(const json& body, std::string_view raw_body,
                                                engine::StructuredOutput& out) {
  out = engine::StructuredOutput{};
  // vLLM's guided_whitespace_pattern, or structured_outputs.whitespace_pattern (the field it
  // came in names the errors).
  std::optional<std::string> whitespace_pattern;
  std::string pattern_field = "guided_whitespace_pattern";
  if (present(body, "guided_whitespace_pattern")) {
    const json& w = body.at("guided_whitespace_pattern");
    if (!w.is_string()) return wrong("guided_whitespace_pattern", "a string (a regex)", w);
    whitespace_pattern = w.get<std::string>();
  }
  if (present(body, "guided_decoding_backend") && !body.at("guided_decoding_backend").is_string()) {
    return wrong("guided_decoding_backend", "a string", body.at("guided_decoding_backend"));
  }
  std::string given;
  for (const char* f : {"response_format", "structured_outputs", "guided_json", "guided_regex",
                        "guided_choice", "guided_grammar"}) {
    if (!present(body, f)) continue;
    engine::StructuredOutput s;
    const std::string field = f;
    if (field == "response_format") {
      PS_API_TRY(parse_response_format(body, raw_body, s));
    } else if (field == "structured_outputs") {
      std::optional<std::string> pattern;
      PS_API_TRY(parse_structured_outputs(body, raw_body, s, pattern));
      if (pattern) {
        if (whitespace_pattern) {
          return bad_request(
              "structured_outputs.whitespace_pattern: not with guided_whitespace_pattern",
              "structured_outputs.whitespace_pattern");
        }
        whitespace_pattern = std::move(pattern);
        pattern_field = "structured_outputs.whitespace_pattern";
      }
    } else if (field == "guided_json") {
      s.field = field;
      s.kind = Kind::kJsonSchema;
      PS_API_ASSIGN(s.spec, schema_text(body.at(f), raw_body, {field}, field));
    } else if (field == "guided_regex") {
      s.field = field;
      PS_API_TRY(regex_field(body.at(f), field, s));
    } else if (field == "guided_grammar") {
      s.field = field;
      PS_API_TRY(grammar_field(body.at(f), field, s));
    } else {
      s.field = field;
      s.kind = Kind::kChoice;
      PS_API_ASSIGN(s.choices, choice_list(body.at(f), field));
    }
    if (!s.active()) continue;
    if (!given.empty()) {
      return bad_request(
          field + ": only one structured output per request, " + given + " constrains it already",
          field);
    }
    given = field;
    out = std::move(s);
  }
  if (out.kind != Kind::kJsonSchema && out.kind != Kind::kJsonObject) {
    out.whitespace.reset();  // whitespace options shape JSON only
  }
  if (whitespace_pattern) {
    if (out.kind == Kind::kJsonObject) {
      return bad_request(
          pattern_field + ": applies to a JSON schema, not to a json_object constraint",
          pattern_field);
    }
    if (out.kind == Kind::kJsonSchema) {
      if (out.whitespace) {
        return bad_request(pattern_field + ": not with structured_outputs.disable_any_whitespace",
                           pattern_field);
      }
      if (Result<grammar::Dfa> alone = grammar::compile_regex(*whitespace_pattern); !alone.ok()) {
        return bad_request(pattern_field + ": " + alone.status().message(), pattern_field);
      }
      out.whitespace = std::move(*whitespace_pattern);
    }
  }
  return std::nullopt;
}

}  // namespace packserve::server
