// request_json.cc: see request_json.h.
#include "packserve/server/request_json.h"

#include <utility>

namespace packserve::server {

using nlohmann::json;

std::string describe(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

ApiError wrong(const std::string& field, const std::string& expected, const json& got) {
  return bad_request(field + ": expected " + expected + ", got " + describe(got), field);
}

bool present(const json& body, const char* field) {
  auto it = body.find(field);
  return it != body.end() && !it->is_null();
}

ApiResult<bool> get_bool(const json& body, const char* field) {
  const json& v = body.at(field);
  if (!v.is_boolean()) return wrong(field, "true or false", v);
  return v.get<bool>();
}

ApiResult<std::vector<int32_t>> token_id_list(const json& v, const std::string& field) {
  std::vector<int32_t> ids;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const json& e = v[i];
    const std::string f = field + "[" + std::to_string(i) + "]";
    if (!e.is_number_integer() ||
        (e.is_number_unsigned() ? e.get<uint64_t>() > uint64_t{INT32_MAX}
                                : (e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX))) {
      return wrong(f, "a token id (an integer >= 0)", e);
    }
    ids.push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  return ids;
}

std::optional<ApiError> check_known_fields(const json& body, const std::set<std::string>& known) {
  for (const auto& [key, value] : body.items()) {
    (void)value;
    if (!known.count(key)) {
      return bad_request("Unrecognized request argument supplied: " + key, key);
    }
  }
  return std::nullopt;
}

ApiResult<std::string> parse_model(const json& body) {
  if (!body.contains("model")) return bad_request("model: required", "model");
  if (!body.at("model").is_string()) return wrong("model", "a string", body.at("model"));
  return body.at("model").get<std::string>();
}

ApiResult<std::string> parse_text_prompt(const json& value, const std::string& field,
                                         const std::string& expected) {
  if (!value.is_string()) return wrong(field, expected, value);
  if (value.get_ref<const std::string&>().empty()) {
    return bad_request(field + ": must not be empty", field);
  }
  return value.get<std::string>();
}

namespace {

// A message's content: a string or a list of {"type": "text", "text"} parts, joined.
ApiResult<std::string> message_content(const json& content, const std::string& f) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return wrong(f, "a string or a list of text parts", content);
  std::string text;
  for (std::size_t j = 0; j < content.size(); ++j) {
    const json& part = content[j];
    const std::string pf = f + "[" + std::to_string(j) + "]";
    if (!part.is_object() || part.value("type", json()) != json("text") || !part.contains("text") ||
        !part.at("text").is_string()) {
      return wrong(pf, "{\"type\": \"text\", \"text\": string} (only text parts)", part);
    }
    text += part.at("text").get<std::string>();
  }
  return text;
}

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name",
// "arguments"}}]; arguments are JSON text (OpenAI's form) or an object.
ApiResult<std::vector<tokenizer::ChatToolCall>> message_tool_calls(const json& v,
                                                                   const std::string& f) {
  if (!v.is_array()) return wrong(f, "a list of tool calls", v);
  std::vector<tokenizer::ChatToolCall> calls;
  for (std::size_t j = 0; j < v.size(); ++j) {
    const json& call = v[j];
    const std::string cf = f + "[" + std::to_string(j) + "]";
    if (!call.is_object()) return wrong(cf, "{\"type\": \"function\", \"function\": {...}}", call);
    if (present(call, "id") && !call.at("id").is_string()) {
      return wrong(cf + ".id", "a string", call.at("id"));
    }
    if (present(call, "type") && call.at("type") != json("function")) {
      return wrong(cf + ".type", "\"function\"", call.at("type"));
    }
    if (!present(call, "function") || !call.at("function").is_object()) {
      return wrong(cf + ".function", "an object with name and arguments",
                   call.value("function", json()));
    }
    const json& fn = call.at("function");
    if (!present(fn, "name") || !fn.at("name").is_string() ||
        fn.at("name").get_ref<const std::string&>().empty()) {
      return wrong(cf + ".function.name", "a non-empty string", fn.value("name", json()));
    }
    tokenizer::ChatToolCall out{fn.at("name").get<std::string>(), "{}"};
    if (present(call, "id")) out.id = call.at("id").get<std::string>();
    if (present(fn, "arguments")) {
      const json& args = fn.at("arguments");
      if (args.is_string()) {
        out.arguments = args.get<std::string>();
      } else if (args.is_object()) {
        out.arguments = args.dump();
      } else {
        return wrong(cf + ".function.arguments", "the JSON text of an object", args);
      }
    }
    calls.push_back(std::move(out));
  }
  return calls;
}

}  // namespace

ApiResult<std::vector<tokenizer::ChatMessage>> parse_messages(const json& body) {
  if (!body.contains("messages")) return bad_request("messages: required", "messages");
  const json& m = body.at("messages");
  if (!m.is_array() || m.empty()) return wrong("messages", "a non-empty list of messages", m);
  std::vector<tokenizer::ChatMessage> messages;
  for (std::size_t i = 0; i < m.size(); ++i) {
    const json& msg = m[i];
    const std::string f = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) return wrong(f, "an object with role and content", msg);
    auto role_it = msg.find("role");
    if (role_it == msg.end()) return bad_request(f + ".role: required", f + ".role");
    if (!role_it->is_string()) return wrong(f + ".role", "a string", *role_it);
    std::string role = role_it->get<std::string>();
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return wrong(f + ".role", "\"system\", \"developer\", \"user\", \"assistant\" or \"tool\"",
                   *role_it);
    }
    for (const auto& [key, value] : msg.items()) {
      const bool known =
          key == "role" || key == "content" || key == "name" ||
          ((key == "tool_calls" || key == "reasoning_content") && role == "assistant") ||
          (key == "tool_call_id" && role == "tool");
      if (!known) {
        return bad_request(
            f + "." + key + ": not supported (messages take role, content, " +
                "name; assistant messages tool_calls, reasoning_content; tool messages " +
                "tool_call_id)",
            f + "." + key);
      }
      (void)value;
    }
    tokenizer::ChatMessage message{std::move(role), ""};
    if (present(msg, "content")) {
      PS_API_ASSIGN(message.content, message_content(msg.at("content"), f + ".content"));
    } else if (message.role != "assistant") {
      return bad_request(f + ".content: required", f + ".content");
    }
    if (present(msg, "name") && !msg.at("name").is_string()) {
      return wrong(f + ".name", "a string", msg.at("name"));
    }
    if (present(msg, "tool_call_id")) {
      if (!msg.at("tool_call_id").is_string()) {
        return wrong(f + ".tool_call_id", "a string", msg.at("tool_call_id"));
      }
      message.tool_call_id = msg.at("tool_call_id").get<std::string>();
    }
    if (present(msg, "reasoning_content")) {
      if (!msg.at("reasoning_content").is_string()) {
        return wrong(f + ".reasoning_content", "a string", msg.at("reasoning_content"));
      }
      message.reasoning = msg.at("reasoning_content").get<std::string>();
    }
    if (present(msg, "tool_calls")) {
      PS_API_ASSIGN(message.tool_calls,
                    message_tool_calls(msg.at("tool_calls"), f + ".tool_calls"));
    }
    messages.push_back(std::move(message));
  }
  return messages;
}

std::optional<ApiError> parse_chat_template_kwargs(const json& body,
                                                   tokenizer::ChatRenderOptions& options) {
  if (!present(body, "chat_template_kwargs")) return std::nullopt;
  const json& kwargs = body.at("chat_template_kwargs");
  if (!kwargs.is_object()) return wrong("chat_template_kwargs", "an object", kwargs);
  for (const auto& [key, value] : kwargs.items()) {
    const std::string f = "chat_template_kwargs." + key;
    if (key == "enable_thinking") {
      if (!value.is_boolean()) return wrong(f, "true or false", value);
      options.enable_thinking = value.get<bool>();
    } else if (key == "date_string") {
      if (!value.is_string()) return wrong(f, "a string", value);
      options.date_string = value.get<std::string>();
    } else {
      return bad_request(f + ": not supported (only enable_thinking and date_string)", f);
    }
  }
  return std::nullopt;
}

std::optional<ApiError> parse_generation_prompt(const json& body, bool& add_generation_prompt,
                                                tokenizer::ChatRenderOptions& options) {
  if (present(body, "add_generation_prompt")) {
    PS_API_ASSIGN(add_generation_prompt, get_bool(body, "add_generation_prompt"));
  }
  if (!present(body, "continue_final_message")) return std::nullopt;
  PS_API_ASSIGN(options.continue_final_message, get_bool(body, "continue_final_message"));
  if (!options.continue_final_message) return std::nullopt;
  if (present(body, "add_generation_prompt") && add_generation_prompt) {
    return bad_request(
        "continue_final_message: cannot be true with add_generation_prompt true (the final "
        "message is continued, no new turn is opened)",
        "continue_final_message");
  }
  add_generation_prompt = false;
  return std::nullopt;
}

}  // namespace packserve::server
