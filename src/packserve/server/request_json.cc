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
    if (role != "system" && role != "user" && role != "assistant") {
      return wrong(f + ".role", "\"system\", \"developer\", \"user\" or \"assistant\"", *role_it);
    }
    for (const auto& [key, value] : msg.items()) {
      if (key != "role" && key != "content" && key != "name") {
        return bad_request(f + "." + key + ": not supported (messages take role, content, name)",
                           f + "." + key);
      }
      (void)value;
    }
    auto content_it = msg.find("content");
    std::string content;
    if (content_it == msg.end() || content_it->is_null()) {
      if (role != "assistant") return bad_request(f + ".content: required", f + ".content");
    } else if (content_it->is_string()) {
      content = content_it->get<std::string>();
    } else if (content_it->is_array()) {
      for (std::size_t j = 0; j < content_it->size(); ++j) {
        const json& part = (*content_it)[j];
        const std::string pf = f + ".content[" + std::to_string(j) + "]";
        if (!part.is_object() || part.value("type", json()) != json("text") ||
            !part.contains("text") || !part.at("text").is_string()) {
          return wrong(pf, "{\"type\": \"text\", \"text\": string} (only text parts)", part);
        }
        content += part.at("text").get<std::string>();
      }
    } else {
      return wrong(f + ".content", "a string or a list of text parts", *content_it);
    }
    messages.push_back(tokenizer::ChatMessage{std::move(role), std::move(content)});
  }
  return messages;
}

}  // namespace packserve::server
