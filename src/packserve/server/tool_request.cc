// tool_request.cc: see tool_request.h.
#include "packserve/server/tool_request.h"

#include <algorithm>
#include <set>

#include "packserve/grammar/json_schema.h"
#include "packserve/server/request_json.h"

namespace packserve::server {
namespace {

using nlohmann::json;
using Kind = engine::StructuredOutput::Kind;

bool valid_tool_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

// tools[i]'s function object: its keys and their types.
std::optional<ApiError> check_function(const json& fn, const std::string& f) {
  if (!fn.is_object()) return wrong(f, "an object with a \"name\"", fn);
  for (const auto& [key, value] : fn.items()) {
    const std::string kf = f + "." + key;
    if (key == "description") {
      if (!value.is_string() && !value.is_null()) return wrong(kf, "a string", value);
    } else if (key == "strict") {
      if (!value.is_boolean() && !value.is_null()) return wrong(kf, "true or false", value);
    } else if (key == "parameters") {
      if (!value.is_object() && !value.is_null()) {
        return wrong(kf, "a JSON schema object", value);
      }
    } else if (key != "name") {
      return bad_request(kf + ": not expected (name, description, parameters, strict)", kf);
    }
  }
  if (!present(fn, "name")) return bad_request(f + ".name: required", f + ".name");
  const json& name = fn.at("name");
  if (!name.is_string() || !valid_tool_name(name.get<std::string>())) {
    return wrong(f + ".name", "1 to 64 letters, digits, '_' or '-'", name);
  }
  return std::nullopt;
}

std::optional<ApiError> parse_tool_choice(const json& body, OpenAiRequest& out) {
  out.tool_choice = out.tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  if (!present(body, "tool_choice")) return std::nullopt;
  const json& v = body.at("tool_choice");
  const std::string expected =
      "\"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": "
      "...}}";
  if (v.is_string()) {
    const std::string choice = v.get<std::string>();
    if (choice == "none") {
      out.tool_choice = ToolChoice::kNone;
      return std::nullopt;
    }
    if (choice != "auto" && choice != "required") return wrong("tool_choice", expected, v);
    if (out.tools.empty()) {
      return bad_request("tool_choice: \"" + choice + "\" needs tools", "tool_choice");
    }
    out.tool_choice = choice == "auto" ? ToolChoice::kAuto : ToolChoice::kRequired;
    return std::nullopt;
  }
  if (!v.is_object() || v.value("type", json()) != json("function") || !v.contains("function") ||
      !v.at("function").is_object() || !v.at("function").contains("name") ||
      !v.at("function").at("name").is_string()) {
    return wrong("tool_choice", expected, v);
  }
  const std::string name = v.at("function").at("name").get<std::string>();
  const auto it = std::find_if(out.tools.begin(), out.tools.end(),
                               [&](const Tool& t) { return t.name == name; });
  if (it == out.tools.end()) {
    return bad_request("tool_choice.function.name: \"" + name + "\" is not one of the tools",
                       "tool_choice.function.name");
  }
  out.tool_choice = ToolChoice::kNamed;
  out.tool_choice_index = static_cast<std::size_t>(it - out.tools.begin());
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_tools(const json& body, std::string_view raw_body,
                                    std::vector<Tool>& out) {
  const json& v = body.at("tools");
  if (!v.is_array()) {
    return wrong("tools", "a list of {\"type\": \"function\", \"function\": {...}}", v);
  }
  if (v.size() > kMaxTools) {
    return bad_request("tools: expected at most " + std::to_string(kMaxTools) + " tools, got " +
                           std::to_string(v.size()),
                       "tools");
  }
  // The body parsed and passed the depth check already.
  const nlohmann::ordered_json ordered =
      nlohmann::ordered_json::parse(raw_body.begin(), raw_body.end()).at("tools");
  std::set<std::string> names;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string f = "tools[" + std::to_string(i) + "]";
    const json& tool = v[i];
    if (!tool.is_object()) return wrong(f, "{\"type\": \"function\", \"function\": {...}}", tool);
    for (const auto& [key, value] : tool.items()) {
      if (key != "type" && key != "function") {
        return bad_request(f + "." + key + ": not expected (type, function)", f + "." + key);
      }
      (void)value;
    }
    if (!tool.contains("type") || tool.at("type") != json("function")) {
      return wrong(f + ".type", "\"function\"", tool.value("type", json()));
    }
    if (!tool.contains("function")) {
      return bad_request(f + ".function: required", f + ".function");
    }
    PS_API_TRY(check_function(tool.at("function"), f + ".function"));
    Tool t;
    t.name = tool.at("function").at("name").get<std::string>();
    if (!names.insert(t.name).second) {
      return bad_request(f + ".function.name: \"" + t.name + "\" names an earlier tool too",
                         f + ".function.name");
    }
    const json& strict = tool.at("function").value("strict", json());
    t.strict = strict.is_boolean() && strict.get<bool>();
    t.definition = ordered[i].dump();
    if (present(tool.at("function"), "parameters")) {
      t.parameters = ordered[i].at("function").at("parameters").dump();
    }
    out.push_back(std::move(t));
  }
  return std::nullopt;
}

std::string arguments_schema(const Tool& tool) {
  return tool.parameters.empty() ? std::string(R"({"type":"object"})") : tool.parameters;
}

ApiResult<engine::StructuredOutput> required_calls_constraint(const std::vector<Tool>& tools,
                                                              bool parallel,
                                                              ToolCallFormat format) {
  const std::string key = format == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
  std::string any_of;
  for (const Tool& tool : tools) {
    if (!any_of.empty()) any_of += ",";
    any_of += R"({"type":"object","properties":{"name":{"const":)" + json(tool.name).dump() +
              R"(},")" + key + R"(":)" + arguments_schema(tool) + R"(},"required":["name",")" +
              key + R"("]})";
  }
  const std::string schema = R"({"anyOf":[)" + any_of + "]}";
  grammar::JsonSchemaOptions holes;
  holes.free_form_holes = true;
  Result<std::string> call = grammar::json_schema_to_regex(schema, holes);
  if (!call.ok()) return bad_request("tools: " + call.status().message(), "tools");
  Result<std::string> spelt_out = grammar::json_schema_to_regex(schema);
  if (!spelt_out.ok()) return bad_request("tools: " + spelt_out.status().message(), "tools");
  // The calls in the model's syntax around the regex of one call.
  auto calls = [&](const std::string& one_call) -> std::string {
    if (format == ToolCallFormat::kLlama3Json) return one_call;
    if (format == ToolCallFormat::kMistral) {
      // The [TOOL_CALLS] control token is no text a constraint can allow: the list alone.
      const std::string one = "(?:" + one_call + ")";
      return " ?\\[" + one + (parallel ? "(?:, " + one + ")*" : "") + "\\]";
    }
    if (parallel) return "(?:<tool_call>\\n" + one_call + "\\n</tool_call>\\n?)+";
    return "<tool_call>\\n" + one_call + "\\n</tool_call>";
  };
  engine::StructuredOutput out;
  out.kind = Kind::kRegex;
  out.field = "tools";
  out.spec = calls(*call);
  out.spelt_out = calls(*spelt_out);
  return out;
}

std::optional<engine::StructuredOutput> auto_calls_constraint(const std::vector<Tool>& tools,
                                                              bool parallel,
                                                              ToolCallFormat format) {
  const bool any_strict =
      std::any_of(tools.begin(), tools.end(), [](const Tool& t) { return t.strict; });
  if (!any_strict || format == ToolCallFormat::kMistral) return std::nullopt;
  // What opens a call, and a call of `name` up to its arguments and after them.
  const bool llama = format == ToolCallFormat::kLlama3Json;
  const std::string trigger = llama ? "{\"name\":" : "<tool_call>";
  const auto begin = [&](const std::string& name) {
    return llama ? "{\"name\": " + json(name).dump() + ", \"parameters\": "
                 : "<tool_call>\n{\"name\": " + json(name).dump() + ", \"arguments\": ";
  };
  const std::string end = llama ? "}" : "}\n</tool_call>";
  nlohmann::ordered_json structures = nlohmann::ordered_json::array();
  for (const Tool& tool : tools) {
    const std::string schema = tool.strict ? arguments_schema(tool) : R"({"type":"object"})";
    structures.push_back({{"begin", begin(tool.name)},
                          {"schema", nlohmann::ordered_json::parse(schema)},
                          {"end", end}});
  }
  engine::StructuredOutput out;
  out.kind = Kind::kStructuralTag;
  out.field = "tools";
  nlohmann::ordered_json tag = {{"structures", structures},
                                {"triggers", nlohmann::ordered_json::array({trigger})}};
  if (!parallel) tag["stop_after_first"] = true;  // the output ends with the one call
  out.spec = tag.dump();
  return out;
}

std::optional<ApiError> parse_tool_fields(const json& body, std::string_view raw_body,
                                          OpenAiRequest& out) {
  if (present(body, "tools")) PS_API_TRY(parse_tools(body, raw_body, out.tools));
  PS_API_TRY(parse_tool_choice(body, out));
  if (present(body, "parallel_tool_calls")) {
    PS_API_ASSIGN(out.parallel_tool_calls, get_bool(body, "parallel_tool_calls"));
  }
  if (out.tool_choice != ToolChoice::kRequired && out.tool_choice != ToolChoice::kNamed) {
    return std::nullopt;
  }
  if (out.structured.active()) {
    return bad_request(
        "tool_choice: a required or named tool choice constrains the output to the calls; it "
        "cannot be combined with " +
            out.structured.field,
        "tool_choice");
  }
  if (out.tool_choice == ToolChoice::kNamed) {
    out.structured.kind = Kind::kJsonSchema;
    out.structured.spec = arguments_schema(out.tools[out.tool_choice_index]);
    out.structured.field =
        "tools[" + std::to_string(out.tool_choice_index) + "].function.parameters";
  }
  return std::nullopt;
}

}  // namespace packserve::server
